// `outbox-dev bench`: producer clients, closed or open loop.

#include "bench_clients.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>

#include "outbox/error.hpp"
#include "outbox/producer.hpp"
#include "workload.hpp"

namespace outbox::cli::bench {
namespace {

// One business transaction (an order row and a customer counter), with one event when asked.
// Returns the event's id (nil without an event).
EventId business_transaction(PGconn* conn, const workload::Orders& orders, const Producer* producer,
                             std::int64_t order_id, std::mt19937& random, const std::string& note) {
  const int customer = static_cast<int>(random() % workload::kCustomers);
  const auto total = static_cast<std::int64_t>(random() % 100000);
  pg::exec(conn, "BEGIN");
  orders.place(order_id, customer, total, note);
  if (producer == nullptr) {
    pg::commit(conn);
    return EventId{};
  }
  // The event is the transaction's last statement: it goes with the COMMIT, in one round trip.
  return producer
      ->enqueue_and_commit(conn, NewEvent{"order", std::to_string(order_id), "OrderPlaced",
                                          fmt::format(R"({{"order_id":{},"customer_id":{},)"
                                                      R"("total_cents":{},"note":"{}"}})",
                                                      order_id, customer, total, note),
                                          "{}", 1, std::nullopt})
      .event_id;
}

// When a client's k-th transaction is due on an open-loop schedule at `rate` per second overall.
Clock::time_point due(Clock::time_point started, double rate, int clients, int client,
                      std::uint64_t k) {
  const double interval = static_cast<double>(clients) / rate;
  return started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                       interval * (static_cast<double>(k) +
                                   static_cast<double>(client) / static_cast<double>(clients))));
}

}  // namespace

Percentiles percentiles(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  auto at = [&](double p) {
    return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1))];
  };
  return {at(0.50), at(0.95), at(0.99), values.back()};
}

TxResult run_clients(const Setup& setup, const SchemaName& schema, bool with_event, int clients,
                     double seconds, double rate, std::atomic<std::int64_t>& next_order,
                     const std::function<void(const EventId&, double)>& on_commit,
                     bool table_less) {
  ProducerOptions producer_options{schema, 4096};
  producer_options.table_less = table_less;
  const Producer producer(producer_options);
  const std::string note(static_cast<std::size_t>(std::max(0, setup.options.payload_bytes - 72)),
                         'x');
  std::mutex mutex;
  TxResult total;
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  std::string failure;
  const auto started = Clock::now();
  const auto until = started + std::chrono::duration<double>(seconds);
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        auto connection = setup.connect();
        const workload::Orders orders(connection.get(), schema);
        std::mt19937 random(static_cast<unsigned>(c) * 7919U + 1);
        std::vector<double> latencies;
        for (std::uint64_t k = 0;; ++k) {
          if (rate > 0) {
            const auto at = due(started, rate, clients, c, k);
            if (at >= until) break;
            std::this_thread::sleep_until(at);
          } else if (Clock::now() >= until) {
            break;
          }
          const auto begun = Clock::now();
          const EventId id =
              business_transaction(connection.get(), orders, with_event ? &producer : nullptr,
                                   next_order.fetch_add(1), random, note);
          const double committed_at = wall_now();
          latencies.push_back(
              std::chrono::duration<double, std::milli>(Clock::now() - begun).count());
          if (on_commit) on_commit(id, committed_at);
        }
        std::lock_guard lock(mutex);
        total.transactions += latencies.size();
        total.latencies_ms.insert(total.latencies_ms.end(), latencies.begin(), latencies.end());
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        failed = true;
        failure = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed) throw Error("bench: a client failed: " + failure);
  total.seconds = seconds_since(started);
  return total;
}

}  // namespace outbox::cli::bench
