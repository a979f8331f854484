#include "fault/scenarios.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "fault/history.hpp"
#include "fault/process.hpp"
#include "fault/workers.hpp"
#include "outbox/embedded_postgres.hpp"
#include "outbox/kafka_mock.hpp"
#include "outbox/producer.hpp"
#include "outbox/transaction.hpp"
#include "pg/connection.hpp"
#include "support/claim_plan.hpp"

namespace outbox::campaign {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The embedded servers, the consumer process and the relay processes of one scenario.
struct Stage {
  explicit Stage(const ScenarioOptions& o) : options(o) {
    char dir_template[] = "/tmp/outbox-scenario-XXXXXX";
    if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = dir_template;
    kafka.create_topic(kTopic, 6, 3);
    url = postgres.connection_string();
    migrate(url, SchemaName(kSchema));
    create_campaign_tables(url);
    consumer = Process(
        {options.self_binary, "consumer", "--db", url, "--brokers", kafka.bootstrap_servers()}, {},
        log("consumer"));
  }
  ~Stage() {
    for (auto& r : relays) r.stop(10s);
    consumer.stop(10s);
    if (!options.keep) std::filesystem::remove_all(dir);
  }
  std::string log(const std::string& name) const { return (dir / (name + ".log")).string(); }
  void start_relays() {
    for (int i = 0; i < 2; ++i) {
      relays.emplace_back(
          std::vector<std::string>{options.outbox_binary, "relay", "--db", url, "--schema", kSchema,
                                   "--kafka-brokers", kafka.bootstrap_servers(), "--relay-id",
                                   fmt::format("r{}", i + 1)},
          std::map<std::string, std::string>{}, log(fmt::format("relay{}", i + 1)));
    }
  }
  HistoryReport check() {
    HistoryInput input{url,
                       kafka.bootstrap_servers(),
                       kTopic,
                       {log("writers.transactions")},
                       {log("relay1"), log("relay2")}};
    return check_history(input, 180s);
  }

  ScenarioOptions options;
  std::filesystem::path dir;
  EmbeddedPostgres postgres;
  KafkaMockCluster kafka{3};
  std::string url;
  Process consumer;
  std::vector<Process> relays;
};

// In-process writers that log like the producer workers (see workers.hpp), for the checker.
class TransactionLog {
 public:
  explicit TransactionLog(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  ~TransactionLog() { ::close(fd_); }
  void line(const std::string& text) {
    const std::string with_newline = text + "\n";
    std::lock_guard lock(mutex_);
    if (::write(fd_, with_newline.data(), with_newline.size()) < 0) std::perror("log");
  }

 private:
  int fd_;
  std::mutex mutex_;
};

// One transaction: enqueue `events`, optionally hold it open, then commit or roll back.
void write_transaction(PGconn* conn, const Producer& producer, const std::vector<NewEvent>& events,
                       std::chrono::milliseconds hold, bool roll_back, TransactionLog& log) {
  pg::exec(conn, "BEGIN");
  const auto enqueued = producer.enqueue(conn, events);
  std::string pending = "pending " + std::to_string(enqueued.front().transaction_id);
  for (const auto& e : enqueued) pending += " " + e.event_id.to_string();
  log.line(pending);
  if (hold.count() > 0) std::this_thread::sleep_for(hold);
  if (roll_back) {
    pg::exec(conn, "ROLLBACK");
    log.line("rolledback " + std::to_string(enqueued.front().transaction_id));
  } else {
    outbox::commit(conn);
    log.line("ok " + std::to_string(enqueued.front().transaction_id));
  }
}

std::string verdict_line(const std::string& name, const HistoryReport& r) {
  return fmt::format(
      "{}: intents={} lost={} phantom={} rolled_back_intents={} duplicate_publishes={} "
      "duplicate_effects={} inversions={} stuck={}",
      name, r.intents, r.lost, r.phantom, r.rolled_back_intents, r.duplicate_publishes,
      r.duplicate_effects, r.inversions, r.stuck);
}

int finish(const std::string& name, const HistoryReport& report, bool extra_ok) {
  std::cout << verdict_line(name, report) << "\n";
  for (const auto& example : report.examples) std::cout << "  " << example << "\n";
  const bool ok = report.violations() == 0 && extra_ok;
  std::cout << name << (ok ? ": 1 passed, 0 failed" : ": 0 passed, 1 failed") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace

int run_stalled_relay(const ScenarioOptions& options) {
  Stage stage(options);
  auto connection = pg::Connection::open(stage.url, "scenario");
  TransactionLog log(stage.log("writers.transactions"));

  // The backlog, written while no relay runs: ten events per transaction, several writers.
  const auto write_started = Clock::now();
  std::atomic<int> next{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < options.writers; ++w) {
    writers.emplace_back([&, w] {
      auto c = pg::Connection::open(stage.url, "scenario-writer");
      const Producer producer(ProducerOptions{SchemaName(kSchema), 4096});
      std::mt19937 random(static_cast<unsigned>(w) + 1);
      for (int start = next.fetch_add(10); start < options.events; start = next.fetch_add(10)) {
        std::vector<NewEvent> events;
        for (int i = 0; i < 10 && start + i < options.events; ++i) {
          events.push_back(NewEvent{"account",
                                    "acct-" + std::to_string(random() % options.aggregates),
                                    "Deposited",
                                    R"({"cents":)" + std::to_string(start + i) + "}",
                                    "{}",
                                    1,
                                    {}});
        }
        write_transaction(c.get(), producer, events, 0ms, false, log);
      }
    });
  }
  for (auto& t : writers) t.join();
  const double write_seconds = std::chrono::duration<double>(Clock::now() - write_started).count();
  const long long touched_full =
      testing::claim_plan_rows(connection.get(), SchemaName(kSchema), 500);

  // Two relays drain it; meanwhile the slowest relay statement in flight is sampled.
  const auto drain_started = Clock::now();
  stage.start_relays();
  double slowest_ms = 0;
  double published_seconds = 0;
  for (;;) {
    const auto sample =
        pg::exec(connection.get(),
                 "SELECT (SELECT count(*) FROM campaign.outbox_events WHERE published_at IS NULL),"
                 " coalesce((SELECT max(extract(epoch FROM clock_timestamp() - query_start)) * 1000"
                 "  FROM pg_stat_activity WHERE application_name = 'outbox-relay' AND state = "
                 "'active'), 0)");
    slowest_ms = std::max(slowest_ms, std::stod(std::string(sample.text(0, 1))));
    if (sample.int64(0, 0) == 0) {
      published_seconds = std::chrono::duration<double>(Clock::now() - drain_started).count();
      break;
    }
    if (Clock::now() - drain_started > 300s) break;
    std::this_thread::sleep_for(20ms);
  }
  const HistoryReport report = stage.check();
  const double applied_seconds =
      std::chrono::duration<double>(Clock::now() - drain_started).count();
  std::cout
      << fmt::format(
             "stalled-relay: backlog {} events over {} aggregates written in {:.1f} s; two "
             "relays published it in {:.1f} s ({:.0f} events/s), applied by {:.1f} s; a claim "
             "of 500 at full backlog touched {} plan rows; slowest relay statement seen "
             "{:.0f} ms",
             options.events, options.aggregates, write_seconds, published_seconds,
             published_seconds > 0 ? options.events / published_seconds : 0.0, applied_seconds,
             touched_full, slowest_ms)
      << "\n";
  // Bounded: a few dozen plan rows per head visited (the backlog-reading plan touched 11 million),
  // and no relay statement slow (a successor lookup that scanned the pending index per marked row
  // took 7 s here; fixed, 48 ms).
  if (slowest_ms >= 2000) {
    std::cout << fmt::format("stalled-relay: a relay statement ran {:.0f} ms (limit 2000)\n",
                             slowest_ms);
  }
  return finish("stalled-relay", report,
                published_seconds > 0 && touched_full < 50 * 500 && slowest_ms < 2000);
}

int run_hot_aggregates(const ScenarioOptions& options) {
  Stage stage(options);
  stage.start_relays();
  TransactionLog log(stage.log("writers.transactions"));
  const auto until = Clock::now() + std::chrono::seconds(options.seconds);
  std::atomic<long> transactions{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < options.writers; ++w) {
    writers.emplace_back([&, w] {
      auto c = pg::Connection::open(stage.url, "scenario-writer");
      const Producer producer(ProducerOptions{SchemaName(kSchema), 4096});
      std::mt19937 random(static_cast<unsigned>(w) * 31U + 7U);
      while (Clock::now() < until) {
        // Three hot aggregates; a transaction sometimes touches two, in a fixed order (as
        // applications do to avoid deadlocks); held open 0-30 ms, now and then 300 ms.
        const int first = static_cast<int>(random() % 3);
        std::vector<NewEvent> events{
            NewEvent{"account", "hot-" + std::to_string(first), "Deposited", "{}", "{}", 1, {}}};
        if (random() % 4 == 0 && first < 2) {
          events.push_back(NewEvent{
              "account", "hot-" + std::to_string(first + 1), "Deposited", "{}", "{}", 1, {}});
        }
        const auto hold = random() % 20 == 0 ? 300ms : std::chrono::milliseconds(random() % 30);
        write_transaction(c.get(), producer, events, hold, random() % 10 == 0, log);
        ++transactions;
      }
    });
  }
  for (auto& t : writers) t.join();
  const HistoryReport report = stage.check();
  std::cout << fmt::format("hot-aggregates: {} writers, 3 aggregates, {} transactions in {} s",
                           options.writers, transactions.load(), options.seconds)
            << "\n";
  return finish("hot-aggregates", report, true);
}

}  // namespace outbox::campaign
