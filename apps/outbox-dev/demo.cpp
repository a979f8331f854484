// `outbox-dev demo`: an order service, relays and a consumer on embedded PostgreSQL and Kafka, then
// a check of every guarantee against what actually happened.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_set>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "demo_brokers.hpp"
#include "demo_saga.hpp"
#include "outbox/http_sink.hpp"
#include "outbox/kafka.hpp"
#include "outbox/producer.hpp"
#include "outbox/relay.hpp"
#include "outbox/testing/http_receiver.hpp"
#include "outbox/testing/nats_server.hpp"
#include "outbox/testing/rabbitmq_server.hpp"
#include "outbox/testing/redis_server.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"
#include "servers.hpp"
#include "workload.hpp"

namespace outbox::cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct DemoOptions {
  std::string database_url;         // empty: embedded PostgreSQL
  std::string kafka_brokers;        // empty: embedded Kafka mock cluster
  std::string scenario = "orders";  // orders, or saga (demo_saga.cpp)
  int orders = 0;                   // 0: 3000, or 40 for the saga
  int writers = 4;
  int relays = 2;
  int rollback_percent = 10;
  int customers = 20;  // of workload::kCustomers
  bool json = false;
  bool quiet = false;
  std::string source = "both";  // polling, cdc, or both (one after the other)
  std::string sink = "kafka";   // kafka, nats, rabbitmq, redis (embedded servers), or http
};

const SchemaName kSchema("outbox_demo");
// Each run publishes to topics of its own ("outbox_demo.order", "outbox_demo_cdc.order", ...),
// so a second run's consumers never read the first run's messages.
std::string topic_prefix(RelaySource source) {
  return source == RelaySource::cdc ? "outbox_demo_cdc" : "outbox_demo";
}

// What the writers know for sure about their own transactions.
struct WriteLog {
  std::mutex mutex;
  std::vector<EventId> committed;
  std::vector<EventId> rolled_back;
  std::uint64_t committed_transactions = 0;
  std::uint64_t rolled_back_transactions = 0;
  std::uint64_t unknown_transactions = 0;
};

// The order service's tables (shared with the bench), and the consumer's.
void create_business_tables(PGconn* conn) {
  workload::create_tables(conn, kSchema);
  pg::exec(conn, fmt::format(R"SQL(
-- What the consumer did: no unique key on purpose, so a duplicate effect would show up here.
CREATE TABLE {s}.effects (
  applied_order bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregate_type text NOT NULL,
  aggregate_id text NOT NULL, aggregate_sequence bigint NOT NULL, previous_sequence bigint NOT NULL);
CREATE TABLE {s}.projection (
  aggregate_type text, aggregate_id text, last_sequence bigint NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id));
)SQL",
                             fmt::arg("s", kSchema.quoted())));
}

// The consumer's effect: a projection that must see every aggregate's events in sequence.
void apply_effect(PGconn* conn, const ConsumedEvent& event) {
  const std::string sequence = std::to_string(event.aggregate_sequence);
  const std::string id = event.event_id.to_string();
  const std::string s = kSchema.quoted();
  // Two statements on purpose: inside one statement, FOR UPDATE skips a row that the same
  // statement's ON CONFLICT DO UPDATE has already changed, and would read "no previous event".
  const auto previous = pg::exec(
      conn,
      "SELECT coalesce((SELECT last_sequence FROM " + s +
          ".projection WHERE aggregate_type = $1 AND aggregate_id = $2 FOR UPDATE), 0)::text",
      {event.aggregate_type.c_str(), event.aggregate_id.c_str()});
  const std::string previous_sequence(previous.text(0, 0));
  pg::exec(conn,
           fmt::format(R"SQL(WITH effect AS (
  INSERT INTO {s}.effects (event_id, aggregate_type, aggregate_id, aggregate_sequence,
                           previous_sequence)
  VALUES ($1::uuid, $2, $3, $4::bigint, $5::bigint)
)
INSERT INTO {s}.projection (aggregate_type, aggregate_id, last_sequence) VALUES ($2, $3, $4)
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = EXCLUDED.last_sequence)SQL",
                       fmt::arg("s", s)),
           {id.c_str(), event.aggregate_type.c_str(), event.aggregate_id.c_str(), sequence.c_str(),
            previous_sequence.c_str()});
}

// The events of one step of an order's life (0 placed, 1 items added, 2 paid), after its change to
// the order service's tables.
std::vector<NewEvent> order_step(const workload::Orders& tables, int n, int customer_number,
                                 int step) {
  const std::string order = fmt::format("order-{:07}", n);
  const std::string customer = fmt::format("customer-{:03}", customer_number);
  const int item_count = 1 + n % 3;
  std::vector<NewEvent> events;
  auto add = [&](const std::string& type, const std::string& id, const std::string& kind,
                 const nlohmann::json& payload) {
    events.push_back(NewEvent{type, id, kind, payload.dump(), "{}", 1, std::nullopt});
  };
  if (step == 0) {
    tables.place(n, customer_number, 1999 * item_count, "");
    add("order", order, "OrderPlaced", {{"order_id", order}, {"customer", customer}});
    add("customer", customer, "CustomerOrdered", {{"order_id", order}});
  } else if (step == 1) {
    tables.add_items(n, item_count);
    for (int item = 0; item < item_count; ++item) {
      add("order", order, "ItemAdded", {{"order_id", order}, {"sku", 1000 + item}});
    }
  } else {
    tables.pay(n);
    add("order", order, "OrderPaid", {{"order_id", order}, {"amount_cents", 1999 * item_count}});
    add("customer", customer, "CustomerPaid", {{"order_id", order}});
  }
  return events;
}

// One writer: its own orders, several transactions each, some rolled back on purpose; every
// transaction also touches one of a few shared customers, so writers contend on aggregates.
void write_orders(const DemoOptions& options, const std::string& url, int writer, WriteLog& log) {
  auto connection = pg::Connection::open(url, "outbox-demo-writer");
  PGconn* conn = connection.get();
  const Producer producer(ProducerOptions{kSchema, 64 * 1024});
  const workload::Orders tables(conn, kSchema);
  std::mt19937 random(static_cast<unsigned>(writer) * 7919U + 17U);
  std::uniform_int_distribution<int> percent(0, 99);
  std::uniform_int_distribution<int> pick_customer(0, options.customers - 1);
  for (int n = writer; n < options.orders; n += options.writers) {
    const int customer = pick_customer(random);
    for (int step = 0; step < 3; ++step) {
      pg::exec(conn, "BEGIN");
      const bool roll_back = step > 0 && percent(random) < options.rollback_percent;
      try {
        const auto enqueued = producer.enqueue(conn, order_step(tables, n, customer, step));
        if (roll_back) {
          pg::exec(conn, "ROLLBACK");
          std::lock_guard lock(log.mutex);
          ++log.rolled_back_transactions;
          for (const auto& e : enqueued) log.rolled_back.push_back(e.event_id);
          continue;
        }
        pg::commit(conn);
        std::lock_guard lock(log.mutex);
        ++log.committed_transactions;
        for (const auto& e : enqueued) log.committed.push_back(e.event_id);
      } catch (const OutcomeUnknown&) {
        std::lock_guard lock(log.mutex);
        ++log.unknown_transactions;
      } catch (...) {
        pg::rollback_quietly(conn);
        throw;
      }
    }
  }
}

struct Report {
  std::string source;  // the relays': polling or cdc
  std::uint64_t committed = 0, rolled_back = 0, unknown = 0;
  std::uint64_t events_committed = 0, events_rolled_back = 0, events_published = 0;
  std::uint64_t effects_applied = 0, duplicates_suppressed = 0, duplicate_publishes = 0;
  std::uint64_t lost = 0, phantom = 0, rolled_back_intents = 0, duplicate_effects = 0;
  std::uint64_t inversions = 0, fenced = 0, stuck = 0;
  double seconds = 0, drain_seconds = 0;
  [[nodiscard]] bool ok() const {
    return lost == 0 && phantom == 0 && rolled_back_intents == 0 && duplicate_effects == 0 &&
           inversions == 0 && unknown == 0 && stuck == 0;
  }
};

std::uint64_t count(PGconn* conn, const std::string& sql,
                    const std::vector<const char*>& params = {}) {
  return static_cast<std::uint64_t>(pg::exec(conn, sql, params).int64(0, 0));
}

// Plain set arithmetic over what the writers know and what the consumer's table holds.
void check(PGconn* conn, const WriteLog& log, Report& report) {
  const std::string committed = pg::uuid_array(log.committed);
  const std::string rolled_back = pg::uuid_array(log.rolled_back);
  const std::string s = kSchema.quoted();
  report.events_committed = log.committed.size();
  report.events_rolled_back = log.rolled_back.size();
  report.lost = count(conn,
                      "SELECT count(*) FROM unnest($1::uuid[]) c(id) WHERE NOT EXISTS "
                      "(SELECT 1 FROM " +
                          s + ".effects e WHERE e.event_id = c.id)",
                      {committed.c_str()});
  report.phantom = count(conn,
                         "SELECT count(DISTINCT event_id) FROM " + s +
                             ".effects e WHERE e.event_id <> ALL ($1::uuid[])",
                         {committed.c_str()});
  report.rolled_back_intents = count(conn,
                                     "SELECT count(*) FROM " + kSchema.table("outbox_events") +
                                         " WHERE event_id = ANY ($1::uuid[])",
                                     {rolled_back.c_str()});
  report.duplicate_effects =
      count(conn, "SELECT count(*) - count(DISTINCT event_id) FROM " + s + ".effects");
  report.inversions = count(conn, "SELECT count(*) FROM " + s +
                                      ".effects WHERE aggregate_sequence <> previous_sequence + 1");
  report.effects_applied = count(conn, "SELECT count(*) FROM " + s + ".effects");
  report.events_published = count(conn, "SELECT count(*) FROM " + kSchema.table("outbox_events") +
                                            " WHERE published_at IS NOT NULL");
  report.stuck = count(conn, "SELECT count(*) FROM " + kSchema.table("outbox_events") +
                                 " WHERE published_at IS NULL");
}

void print(const Report& r, bool json) {
  if (json) {
    nlohmann::json j = {
        {"source", r.source},
        {"committed", r.committed},
        {"rolled_back", r.rolled_back},
        {"unknown", r.unknown},
        {"events_committed", r.events_committed},
        {"events_rolled_back", r.events_rolled_back},
        {"events_published", r.events_published},
        {"effects_applied", r.effects_applied},
        {"duplicates_suppressed", r.duplicates_suppressed},
        {"lost", r.lost},
        {"phantom", r.phantom},
        {"rolled_back_intents", r.rolled_back_intents},
        {"duplicate_effects", r.duplicate_effects},
        {"inversions", r.inversions},
        {"fenced", r.fenced},
        {"stuck", r.stuck},
        {"seconds", r.seconds},
        {"drain_seconds", r.drain_seconds},
        {"ok", r.ok()},
    };
    std::cout << j.dump() << std::endl;
    return;
  }
  auto line = [](const char* name, std::uint64_t value, const char* note) {
    std::cout << fmt::format("  {:<24}{:>10}  {}\n", name, value, note);
  };
  std::cout << "\ninvariant report (" << r.source << " relays)\n";
  line("transactions committed", r.committed, "");
  line("transactions rolled back", r.rolled_back, "(on purpose)");
  line("events committed", r.events_committed, "");
  line("events published", r.events_published, "marked after the broker's ack");
  line("effects applied", r.effects_applied, "through the inbox");
  line("duplicates suppressed", r.duplicates_suppressed, "redeliveries turned into no-ops");
  line("lost", r.lost, "must be 0: committed, never applied");
  line("phantom", r.phantom, "must be 0: applied, never committed");
  line("rolled-back intents", r.rolled_back_intents, "must be 0");
  line("duplicate effects", r.duplicate_effects, "must be 0");
  line("inversions", r.inversions, "must be 0: applied out of aggregate order");
  line("stuck", r.stuck, "must be 0: still unpublished at the end");
  line("commit outcome unknown", r.unknown, "must be 0 here");
  std::cout << fmt::format(
      "  took {:.1f} s; the last event was applied {:.2f} s after the last commit\n", r.seconds,
      r.drain_seconds);
  std::cout << (r.ok() ? "OK: every invariant held\n" : "FAILED: an invariant was violated\n");
}

// The replication slot of the demo's change-data-capture relays (dropped with the schema).
constexpr const char* kSlot = "outbox_demo";

// The relays, each on a thread of its own, until stop(). With change data capture one of them
// streams and the others wait for the slot as standbys.
class DemoRelays {
 public:
  DemoRelays(int count, const std::string& url, RelaySource source,
             const std::function<std::unique_ptr<Sink>()>& make_sink) {
    for (int i = 0; i < count; ++i) {
      RelayOptions relay_options;
      relay_options.database_url = url;
      relay_options.schema = kSchema;
      relay_options.relay_id = fmt::format("demo-relay-{}", i + 1);
      relay_options.idle_poll_max = 200ms;
      relay_options.source = source;
      relay_options.cdc.slot = kSlot;
      relays_.push_back(std::make_unique<Relay>(relay_options, make_sink()));
    }
    for (auto& relay : relays_) threads_.emplace_back([&relay] { relay->run(); });
  }
  DemoRelays(const DemoRelays&) = delete;
  DemoRelays& operator=(const DemoRelays&) = delete;
  ~DemoRelays() { stop(); }

  [[nodiscard]] std::uint64_t published() const {
    std::uint64_t published = 0;
    for (const auto& relay : relays_) published += relay->stats().published;
    return published;
  }
  // Stops every relay; returns how many marks were fenced.
  std::uint64_t stop() {
    for (auto& relay : relays_) relay->request_stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    std::uint64_t fenced = 0;
    for (const auto& relay : relays_) fenced += relay->stats().fenced;
    return fenced;
  }

 private:
  std::vector<std::unique_ptr<Relay>> relays_;
  std::vector<std::thread> threads_;
};

// The writers, each on a thread of its own.
struct DemoWriters {
  WriteLog log;
  std::atomic<int> left{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;

  void start(const DemoOptions& options, const std::string& url) {
    left = options.writers;
    for (int w = 0; w < options.writers; ++w) {
      threads.emplace_back([&, w] {
        try {
          write_orders(options, url, w, log);
        } catch (const std::exception& e) {
          spdlog::error("writer {} failed: {}", w, e.what());
          failed = true;
        }
        --left;
      });
    }
  }
  void join() {
    for (auto& t : threads) t.join();
  }
  std::uint64_t committed_events() {
    std::lock_guard lock(log.mutex);
    return log.committed.size();
  }
};

// Progress until the writers are done and the consumer has applied every committed event (or
// something failed, or nothing moved for 30 s). Returns when the last commit was seen.
Clock::time_point watch(DemoWriters& writers, const DemoRelays& relays,
                        const std::function<std::uint64_t()>& applied_so_far,
                        const std::atomic<bool>& consumer_failed,
                        const std::function<void(const std::string&)>& say) {
  auto last_commit = Clock::now();
  auto last_progress = Clock::now();
  std::uint64_t last_applied = 0;
  for (;;) {
    std::this_thread::sleep_for(250ms);
    const std::uint64_t committed_events = writers.committed_events();
    const std::uint64_t published = relays.published();
    const auto applied = applied_so_far();
    if (writers.left > 0) last_commit = Clock::now();
    if (applied != last_applied) last_progress = Clock::now();
    last_applied = applied;
    say(fmt::format("  committed {:>7} events | published {:>7} | applied {:>7}", committed_events,
                    published, applied));
    if (writers.failed || consumer_failed) break;
    if (writers.left == 0 && applied >= committed_events) break;
    if (writers.left == 0 && Clock::now() - last_progress > 30s) {
      say("no progress for 30 s; checking what is missing");
      break;
    }
  }
  return last_commit;
}

// The demo's schema and slot, fresh: a slot left from an earlier run would hold WAL of the
// dropped table.
void reset(PGconn* admin) {
  pg::exec(admin,
           "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
           "WHERE slot_name = $1 AND NOT active",
           {kSlot});
  pg::exec(admin, "DROP SCHEMA IF EXISTS " + kSchema.quoted() + " CASCADE");
  migrate(admin, kSchema);
  create_business_tables(admin);
}

// One run of the demo with relays of `source` publishing to `broker`; true when every invariant
// held.
bool run_once(const DemoOptions& options, const std::string& url, const DemoBroker& broker,
              RelaySource source, const std::function<void(const std::string&)>& say) {
  const auto started = Clock::now();
  say(source == RelaySource::cdc
          ? "relays: change data capture (one streams from a replication slot, the others wait "
            "as standbys)"
          : "relays: polling (claims under a lease)");
  DemoRelays relays(options.relays, url, source, broker.make_sink);
  std::atomic<bool> consumer_failed{false};
  std::thread consumer_thread([&] {
    try {
      broker.run_consumer();
    } catch (const std::exception& e) {
      spdlog::error("consumer failed: {}", e.what());
      consumer_failed = true;
    }
  });
  DemoWriters writers;
  say(fmt::format("writing {} orders with {} writers, {} relays, 1 consumer ...", options.orders,
                  options.writers, options.relays));
  writers.start(options, url);
  const auto last_commit = watch(writers, relays, broker.applied, consumer_failed, say);
  writers.join();
  Report report;
  report.source = std::string(source == RelaySource::cdc ? "cdc" : "polling") +
                  (broker.name == "kafka" ? "" : ", " + broker.name);
  report.drain_seconds = std::chrono::duration<double>(Clock::now() - last_commit).count();
  broker.stop_consumer();
  consumer_thread.join();
  report.fenced = relays.stop();

  say("replaying everything through the same inbox ...");
  report.duplicates_suppressed = broker.duplicates() + broker.replay(writers.log.committed.size());
  report.committed = writers.log.committed_transactions;
  report.rolled_back = writers.log.rolled_back_transactions;
  report.unknown = writers.log.unknown_transactions;
  auto admin = pg::Connection::open(url, "outbox-demo");
  check(admin.get(), writers.log, report);
  report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  print(report, options.json);
  return report.ok() && !writers.failed && !consumer_failed;
}

// The HTTP variant: the relays deliver to a webhook receiver in this process that deduplicates by
// Idempotency-Key, as an endpoint that honours it; its effects are what the report checks.
bool run_once_http(const DemoOptions& options, Servers& servers, RelaySource source,
                   const std::function<void(const std::string&)>& say) {
  const auto started = Clock::now();
  const std::string& url = servers.database_url();
  auto admin = pg::Connection::open(url, "outbox-demo");
  reset(admin.get());
  HttpReceiver receiver;
  say("sink: HTTP, to a webhook receiver at " + receiver.url() +
      " (deduplicates by Idempotency-Key)");
  HttpSinkOptions http;
  http.url_template = receiver.url() + "/hooks/{aggregate_type}/{aggregate_id}";
  DemoRelays relays(options.relays, url, source, [&] { return make_http_sink(http); });
  DemoWriters writers;
  say(fmt::format("writing {} orders with {} writers, {} relays ...", options.orders,
                  options.writers, options.relays));
  writers.start(options, url);
  auto last_commit = Clock::now();
  auto last_progress = Clock::now();
  std::uint64_t last_applied = 0;
  for (;;) {
    std::this_thread::sleep_for(250ms);
    const auto applied = receiver.counts().distinct_keys;
    if (writers.left > 0) last_commit = Clock::now();
    if (applied != last_applied) last_progress = Clock::now();
    last_applied = applied;
    say(fmt::format("  committed {:>7} events | published {:>7} | applied {:>7}",
                    writers.committed_events(), relays.published(), applied));
    if (writers.failed || (writers.left == 0 && applied >= writers.committed_events())) break;
    if (writers.left == 0 && Clock::now() - last_progress > 30s) break;
  }
  writers.join();
  Report report;
  report.source = std::string(source == RelaySource::cdc ? "cdc" : "polling") + ", http";
  report.drain_seconds = std::chrono::duration<double>(Clock::now() - last_commit).count();
  report.fenced = relays.stop();
  report.committed = writers.log.committed_transactions;
  report.rolled_back = writers.log.rolled_back_transactions;
  report.unknown = writers.log.unknown_transactions;
  check(admin.get(), writers.log, report);  // the table's side; the effects are the receiver's
  const auto effects = receiver.effects_by_key();
  const auto counts = receiver.counts();
  std::set<std::string> committed;
  for (const EventId& id : writers.log.committed) committed.insert(id.to_string());
  report.lost = static_cast<std::uint64_t>(std::count_if(
      committed.begin(), committed.end(), [&](const auto& id) { return !effects.contains(id); }));
  report.phantom = static_cast<std::uint64_t>(std::count_if(
      effects.begin(), effects.end(), [&](const auto& e) { return !committed.contains(e.first); }));
  report.effects_applied = counts.effects;
  report.duplicates_suppressed = counts.suppressed;
  report.duplicate_effects = counts.duplicate_effects;
  report.inversions = counts.inversions;
  report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  print(report, options.json);
  return report.ok() && !writers.failed;
}

int run_demo(const DemoOptions& given) {
  if (given.scenario == "saga") {
    return run_saga_demo({.database_url = given.database_url,
                          .kafka_brokers = given.kafka_brokers,
                          .orders = given.orders == 0 ? 40 : given.orders,
                          .json = given.json,
                          .quiet = given.quiet});
  }
  DemoOptions options = given;
  if (options.orders == 0) options.orders = 3000;
  if (options.json || options.quiet) spdlog::set_level(spdlog::level::warn);
  auto say = [&](const std::string& text) {
    if (!options.json && !options.quiet) std::cout << text << std::endl;
  };
  Servers servers(options.database_url, options.kafka_brokers, {}, 3, say);
  say(fmt::format("database: {}\nkafka: {}", servers.database_url(), servers.brokers()));
  std::vector<RelaySource> sources;
  if (options.source != "cdc") sources.push_back(RelaySource::polling);
  if (options.source != "polling") sources.push_back(RelaySource::cdc);
  std::optional<RabbitMqServer> rabbitmq;
  if (options.sink == "rabbitmq") {
    rabbitmq.emplace();
    say("rabbitmq: " + rabbitmq->url() + " (a rabbitmq-server node, embedded)");
  }
  std::optional<RedisServer> redis;
  if (options.sink == "redis") {
    redis.emplace();
    say("redis: " + redis->url() + " (a redis-server, append-only file fsynced on each write)");
  }
  std::optional<NatsServer> nats;
  if (options.sink == "nats") {
    nats.emplace();
    say("nats: " + nats->url() + " (nats-server with JetStream, embedded)");
  }
  bool ok = true;
  for (const RelaySource source : sources) {
    if (options.sink == "http") {
      ok = run_once_http(options, servers, source, say) && ok;
      continue;
    }
    const std::string& url = servers.database_url();
    {
      auto admin = pg::Connection::open(url, "outbox-demo");
      reset(admin.get());
    }
    const DemoRun run{topic_prefix(source),
                      source == RelaySource::cdc ? "OUTBOX_DEMO_CDC" : "OUTBOX_DEMO", kSchema,
                      &apply_effect};
    const DemoBroker broker = nats       ? nats_broker(url, nats->url(), run)
                              : rabbitmq ? rabbitmq_broker(url, *rabbitmq, run)
                              : redis    ? redis_broker(url, *redis, run)
                                         : kafka_broker(url, servers, run);
    ok = run_once(options, url, broker, source, say) && ok;
  }
  return ok ? 0 : 1;
}

}  // namespace

void register_demo(Commands& commands) {
  const auto [demo, options] =
      commands.add("demo", "end-to-end demo on embedded PostgreSQL and Kafka", run_demo);
  demo->add_option("--db", options->database_url,
                   "use this database instead of an embedded one (schema outbox_demo is reset)");
  demo->add_option("--kafka-brokers", options->kafka_brokers,
                   "use these brokers instead of the embedded mock cluster");
  demo->add_option("--scenario", options->scenario,
                   "orders: writers, relays and an inbox consumer, with a report of lost, "
                   "phantom and duplicate events; saga: the example order and payment services "
                   "(examples/order-service, examples/payment-service) end to end, with a report "
                   "of the saga's invariants")
      ->check(CLI::IsMember({"orders", "saga"}))
      ->capture_default_str();
  demo->add_option("--orders", options->orders, "orders to write (default 3000; 40 for the saga)")
      ->check(CLI::Range(1, 10000000));
  demo->add_option("--writers", options->writers, "concurrent writer threads")
      ->check(CLI::Range(1, 64));
  demo->add_option("--relays", options->relays, "concurrent relays")->check(CLI::Range(1, 16));
  demo->add_option("--rollback-percent", options->rollback_percent,
                   "share of transactions rolled back on purpose")
      ->check(CLI::Range(0, 100));
  demo->add_option("--source", options->source,
                   "the relays' source: polling, cdc (change data capture), or both, one run "
                   "after the other")
      ->check(CLI::IsMember({"polling", "cdc", "both"}))
      ->capture_default_str();
  demo->add_option("--sink", options->sink,
                   "kafka; nats: a JetStream stream on an embedded nats-server, applied by the "
                   "NATS inbox consumer; rabbitmq: an exchange on an embedded rabbitmq-server "
                   "node, a quorum queue with single active consumer applied by the RabbitMQ "
                   "inbox consumer; redis: streams on an embedded redis-server applied by the "
                   "Redis inbox consumer (a consumer group); or http: the relays deliver to a "
                   "webhook receiver in "
                   "this process "
                   "(Idempotency-Key, signatures' headers, CloudEvents), whose effects the report "
                   "checks")
      ->check(CLI::IsMember({"kafka", "nats", "rabbitmq", "redis", "http"}))
      ->capture_default_str();
  demo->add_flag("--json", options->json, "print the report as one JSON object");
  demo->add_flag("--quiet", options->quiet, "no progress lines");
}

}  // namespace outbox::cli
