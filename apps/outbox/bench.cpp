// `outbox bench`: what outbox costs a writer, how fast it drains a backlog, how soon an event
// reaches the broker — each measured next to the machine's own ceiling in the same run.
//
// Scenarios (all on one PostgreSQL and one Kafka, embedded unless --db / --kafka-brokers):
//   producer  the same business transaction with and without one enqueued event, alternating
//             rounds from several clients; the ratio of their rates is the overhead.
//   ceiling   a backlog drained by a relay whose sink acknowledges at once (`--sink discard`):
//             the claim-and-complete SQL alone, what PostgreSQL allows here.
//   drain     the same backlog drained through the Kafka sink; events/s, CPU, peak RSS.
//   live      producers commit one event per transaction at fixed offered rates and flat out
//             while a relay runs; latency from COMMIT to the row's published_at (set by the mark
//             that follows the broker's ack, so an upper bound of commit→ack).
// Relays run as child processes (`outbox relay`), so their CPU time and peak RSS are their own.

#include <fcntl.h>
#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "cli_common.hpp"
#include "outbox/embedded_postgres.hpp"
#include "outbox/kafka_mock.hpp"
#include "outbox/producer.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"
#include "servers.hpp"
#include "svg_plot.hpp"

extern char** environ;

namespace outbox::cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using nlohmann::json;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Wall-clock seconds since the epoch: the clock PostgreSQL's now() reads too.
double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void progress(const std::string& text) { std::cerr << "  " << text << std::endl; }

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0, max = 0;
};

Percentiles percentiles(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  auto at = [&](double p) {
    return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1))];
  };
  return {at(0.50), at(0.95), at(0.99), values.back()};
}

// ---------------------------------------------------------------------------------------------
// A relay child process.

// CPU seconds (user + system) a local process has used so far; nullopt if it cannot be read.
// CPU seconds from a /proc/.../stat file (a process, or one thread under task/).
std::optional<double> cpu_seconds_in(const std::string& stat_path) {
  std::ifstream stat(stat_path);
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  const auto after_name = line.rfind(')');  // the command name may hold spaces
  if (after_name == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(after_name + 2));
  std::string field;
  long long utime = 0;
  long long stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15: utime, stime
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  if (!fields) return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::optional<double> cpu_seconds_of(pid_t pid) {
  return cpu_seconds_in("/proc/" + std::to_string(pid) + "/stat");
}

// CPU seconds of the embedded Kafka mock cluster: librdkafka names its threads "rdk:mock".
double mock_broker_cpu_seconds() {
  double total = 0;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind("rdk:mock", 0) == 0) {
      total += cpu_seconds_in((task.path() / "stat").string()).value_or(0);
    }
  }
  return total;
}

class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& log_path) : log_path_(log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) {
      throw Error(fmt::format("bench: cannot start {}: {}", args[0], std::strerror(error)));
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  [[nodiscard]] pid_t pid() const { return pid_; }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  struct End {
    int status = 0;
    double cpu_seconds = 0;
    double peak_rss_mib = 0;
  };
  // SIGTERM (the relay drains and exits), SIGKILL after 30 s; returns what the kernel measured.
  End stop() {
    ::kill(pid_, SIGTERM);
    End end;
    struct rusage usage {};
    const auto deadline = Clock::now() + 30s;
    for (;;) {
      const pid_t done = ::wait4(pid_, &end.status, WNOHANG, &usage);
      if (done == pid_) break;
      if (Clock::now() > deadline) ::kill(pid_, SIGKILL);
      std::this_thread::sleep_for(20ms);
    }
    pid_ = -1;
    end.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    end.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
    return end;
  }
  [[nodiscard]] bool running() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

  // The relay's latest "published N" from its stats lines (0 before the first). Reads only what
  // the log gained since the last call (whole lines), not the whole log every time.
  [[nodiscard]] std::uint64_t published() {
    std::ifstream log(log_path_);
    log.seekg(log_offset_);
    std::string line;
    static const std::regex pattern(R"(health \w+, published (\d+))");
    std::smatch match;
    while (std::getline(log, line) && !log.eof()) {  // a line without '\n' yet is read next time
      log_offset_ += static_cast<std::streamoff>(line.size()) + 1;
      if (std::regex_search(line, match, pattern)) latest_published_ = std::stoull(match[1]);
    }
    return latest_published_;
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::streamoff log_offset_ = 0;
  std::uint64_t latest_published_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Setup.

struct Setup {
  const BenchOptions& options;
  std::string url;
  std::string brokers;
  std::string self;
  std::filesystem::path out;
  std::optional<KafkaMockCluster>& kafka;

  pg::Connection connect() const { return pg::Connection::open(url, "outbox-bench"); }

  // A fresh schema with outbox's tables, a business table, and a time-ordered uuid function.
  // A scenario's tables go when it ends: their dead rows would be autovacuum's work during the
  // next scenario.
  void drop_schema(const SchemaName& schema) const {
    auto c = connect();
    pg::exec(c.get(), "SET client_min_messages = warning");
    pg::exec(c.get(), "DROP SCHEMA IF EXISTS " + schema.quoted() + " CASCADE");
  }

  SchemaName fresh_schema(const std::string& name) const {
    const SchemaName schema(name);
    auto c = connect();
    pg::exec(c.get(), "SET client_min_messages = warning");
    pg::exec(c.get(), "DROP SCHEMA IF EXISTS " + schema.quoted() + " CASCADE");
    migrate(c.get(), schema);
    pg::exec(c.get(), fmt::format(R"SQL(
CREATE TABLE {s}.orders (order_id bigint PRIMARY KEY, customer_id int NOT NULL,
                         total_cents bigint NOT NULL, note text NOT NULL);
CREATE TABLE {s}.customers (customer_id int PRIMARY KEY, orders bigint NOT NULL);
INSERT INTO {s}.customers SELECT g, 0 FROM generate_series(0, 999) g;
-- UUIDv7 as the producer makes them (time first), so the backlog has the producer's key order.
CREATE FUNCTION {s}.uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(set_byte(overlay(uuid_send(gen_random_uuid())
           PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                             FROM 3) FROM 1 FOR 6), 6,
           (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid $$;
)SQL",
                                  fmt::arg("s", schema.quoted())));
    if (kafka) kafka->create_topic(topic(schema), 6, 1);
    return schema;
  }

  static std::string topic(const SchemaName& schema) { return schema.name() + ".order"; }

  // `events` events over `aggregates` aggregates, sequence-major (every aggregate's #1, then every
  // #2, ...), as interleaved traffic would leave them. Written by SQL in chunks: this is setup.
  void load_backlog(const SchemaName& schema) const {
    auto c = connect();
    const std::int64_t events = options.events;
    const std::int64_t aggregates = std::min<std::int64_t>(options.aggregates, events);
    const int note = std::max(0, options.payload_bytes - 72);
    const auto started = Clock::now();
    constexpr std::int64_t kChunk = 100000;
    for (std::int64_t from = 0; from < events; from += kChunk) {
      const std::int64_t to = std::min(events, from + kChunk) - 1;
      pg::exec(c.get(),
               fmt::format(R"SQL(
INSERT INTO {events} (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
                      payload)
SELECT {s}.uuid_v7(), 'order', 'order-' || (i % {a}), i / {a} + 1, 'OrderPlaced',
       jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 997),
                          'total_cents', (i * 7919) % 100000, 'note', repeat('x', {note}))
FROM generate_series({from}::bigint, {to}::bigint) i ORDER BY i)SQL",
                           fmt::arg("events", schema.table("outbox_events")),
                           fmt::arg("s", schema.quoted()), fmt::arg("a", aggregates),
                           fmt::arg("note", note), fmt::arg("from", from), fmt::arg("to", to)));
      progress(fmt::format("loading backlog into {}: {}/{} events, {:.0f} s", schema.name(), to + 1,
                           events, seconds_since(started)));
    }
    pg::exec(c.get(), fmt::format(R"SQL(
INSERT INTO {seq} (aggregate_type, aggregate_id, last_sequence)
SELECT aggregate_type, aggregate_id, max(aggregate_sequence) FROM {events}
GROUP BY aggregate_type, aggregate_id)SQL",
                                  fmt::arg("seq", schema.table("outbox_aggregate_sequences")),
                                  fmt::arg("events", schema.table("outbox_events"))));
    pg::exec(c.get(), "VACUUM ANALYZE " + schema.table("outbox_events"));
    pg::exec(c.get(), "CHECKPOINT");
  }

  std::vector<std::string> relay_args(const SchemaName& schema, bool discard, int index = 0) const {
    std::vector<std::string> args{self,
                                  "relay",
                                  "--db",
                                  url,
                                  "--schema",
                                  schema.name(),
                                  "--relay-id",
                                  fmt::format("bench-{}-{}", schema.name(), index + 1),
                                  "--stats-every",
                                  "250ms",
                                  "--batch-size",
                                  std::to_string(options.batch_size),
                                  "--max-in-flight",
                                  std::to_string(options.max_in_flight)};
    if (options.durable_marks) args.emplace_back("--durable-marks");
    if (discard) {
      args.insert(args.end(), {"--sink", "discard"});
    } else {
      args.insert(args.end(), {"--kafka-brokers", brokers, "--topic-template",
                               schema.name() + ".{aggregate_type}"});
      for (const std::string& property : options.kafka_properties) {
        args.insert(args.end(), {"--kafka-property", property});
      }
    }
    return args;
  }
};

// ---------------------------------------------------------------------------------------------
// producer: overhead of one enqueued event on a business transaction.

struct TxResult {
  std::uint64_t transactions = 0;
  double seconds = 0;
  std::vector<double> latencies_ms;
  [[nodiscard]] double rate() const {
    return seconds > 0 ? static_cast<double>(transactions) / seconds : 0;
  }
};

// One business transaction (an order row and a customer counter), with one event when asked.
// Returns the event's id (nil without an event).
EventId business_transaction(PGconn* conn, const SchemaName& schema, const Producer* producer,
                             std::int64_t order_id, std::mt19937& random, const std::string& note) {
  const std::string id = std::to_string(order_id);
  const std::string customer = std::to_string(random() % 1000);
  const std::string total = std::to_string(random() % 100000);
  pg::exec(conn, "BEGIN");
  pg::exec(conn,
           "INSERT INTO " + schema.table("orders") +
               " (order_id, customer_id, total_cents, note) VALUES ($1, $2, $3, $4)",
           {id.c_str(), customer.c_str(), total.c_str(), note.c_str()});
  pg::exec(
      conn,
      "UPDATE " + schema.table("customers") + " SET orders = orders + 1 WHERE customer_id = $1",
      {customer.c_str()});
  if (producer == nullptr) {
    pg::commit(conn);
    return EventId{};
  }
  // The event is the transaction's last statement: it goes with the COMMIT, in one round trip.
  return producer
      ->enqueue_and_commit(conn, NewEvent{"order", id, "OrderPlaced",
                                          fmt::format(R"({{"order_id":{},"customer_id":{},)"
                                                      R"("total_cents":{},"note":"{}"}})",
                                                      id, customer, total, note),
                                          "{}", 1, std::nullopt})
      .event_id;
}

// `clients` threads, each with its own connection, for `seconds`; closed loop unless `rate` > 0,
// then each client keeps its share of an open-loop schedule (late transactions go at once).
// `on_commit(event_id, wall time)` sees every committed event.
TxResult run_clients(const Setup& setup, const SchemaName& schema, bool with_event, int clients,
                     double seconds, double rate, std::atomic<std::int64_t>& next_order,
                     const std::function<void(const EventId&, double)>& on_commit = {}) {
  const Producer producer(ProducerOptions{schema, 4096});
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
        std::mt19937 random(static_cast<unsigned>(c) * 7919U + 1);
        std::vector<double> latencies;
        std::uint64_t k = 0;
        const double interval = rate > 0 ? static_cast<double>(clients) / rate : 0;
        for (;; ++k) {
          if (rate > 0) {
            const auto due =
                started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                              interval * (static_cast<double>(k) +
                                          static_cast<double>(c) / static_cast<double>(clients))));
            if (due >= until) break;
            std::this_thread::sleep_until(due);
          } else if (Clock::now() >= until) {
            break;
          }
          const auto begun = Clock::now();
          const EventId id =
              business_transaction(connection.get(), schema, with_event ? &producer : nullptr,
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

json bench_producer(const Setup& setup) {
  const auto& o = setup.options;
  const SchemaName schema = setup.fresh_schema("bench_producer");
  std::atomic<std::int64_t> next_order{1};
  // Warm up both paths (connections, plans, caches), then alternate rounds so drift and noise on
  // a shared machine fall on both sides alike.
  run_clients(setup, schema, false, o.clients, 1.0, 0, next_order);
  run_clients(setup, schema, true, o.clients, 1.0, 0, next_order);
  TxResult without, with;
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    for (const bool event : {false, true}) {
      TxResult r = run_clients(setup, schema, event, o.clients, o.seconds / kRounds, 0, next_order);
      TxResult& into = event ? with : without;
      into.transactions += r.transactions;
      into.seconds += r.seconds;
      into.latencies_ms.insert(into.latencies_ms.end(), r.latencies_ms.begin(),
                               r.latencies_ms.end());
    }
    progress(fmt::format("producer: round {}/{}: {:.0f} tx/s without, {:.0f} tx/s with an event",
                         round + 1, kRounds, without.rate(), with.rate()));
  }
  const Percentiles a = percentiles(without.latencies_ms);
  const Percentiles b = percentiles(with.latencies_ms);
  setup.drop_schema(
      schema);  // its ~100,000 unpublished events: autovacuum work for later scenarios
  return {{"scenario", "producer"},
          {"clients", o.clients},
          {"without_event_tx_per_s", without.rate()},
          {"with_event_tx_per_s", with.rate()},
          {"overhead_ratio", with.rate() > 0 ? without.rate() / with.rate() : 0},
          {"without_event_p50_ms", a.p50},
          {"without_event_p99_ms", a.p99},
          {"with_event_p50_ms", b.p50},
          {"with_event_p99_ms", b.p99}};
}

// ---------------------------------------------------------------------------------------------
// ceiling and drain: a backlog through one relay process.

json bench_backlog(const Setup& setup, bool discard,
                   std::vector<std::pair<double, double>>& curve) {
  const auto& o = setup.options;
  const std::string name = discard ? "ceiling" : "drain";
  const SchemaName schema = setup.fresh_schema("bench_" + name);
  setup.load_backlog(schema);
  const double start_wall = wall_now();
  const auto started = Clock::now();
  std::vector<std::unique_ptr<Child>> relays;
  for (int i = 0; i < o.relays; ++i) {
    relays.push_back(std::make_unique<Child>(
        setup.relay_args(schema, discard, i),
        (setup.out / fmt::format("relay-{}-{}.log", name, i + 1)).string()));
  }
  auto published_so_far = [&] {
    std::uint64_t sum = 0;
    for (const auto& r : relays) sum += r->published();
    return sum;
  };
  auto all_running = [&] {
    return std::all_of(relays.begin(), relays.end(), [](const auto& r) { return r->running(); });
  };
  std::uint64_t last = 0;
  double last_t = 0;
  auto last_print = Clock::now();
  const auto deadline = started + std::chrono::seconds(o.timeout_seconds);
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(250ms);
    const std::uint64_t published = published_so_far();
    const double t = seconds_since(started);
    if (published != last && t > last_t) {
      curve.emplace_back(t, static_cast<double>(published - last) / (t - last_t));
      last = published;
      last_t = t;
    }
    if (Clock::now() - last_print > 2s) {
      last_print = Clock::now();
      progress(fmt::format("{}: {}/{} published, {:.0f} s", name, published, o.events, t));
    }
    if (published >= static_cast<std::uint64_t>(o.events) || !all_running()) break;
  }
  Child::End end;
  for (auto& r : relays) {
    const Child::End one = r->stop();
    end.cpu_seconds += one.cpu_seconds;
    end.peak_rss_mib = std::max(end.peak_rss_mib, one.peak_rss_mib);
  }
  auto c = setup.connect();
  const auto result = pg::exec(c.get(),
                               "SELECT count(*) FILTER (WHERE published_at IS NULL),"
                               " extract(epoch FROM max(published_at))::float8 FROM " +
                                   schema.table("outbox_events"));
  const long long pending = result.int64(0, 0);
  const double last_mark =
      std::stod(std::string(result.text(0, 1).empty() ? "0" : result.text(0, 1)));
  if (pending != 0) {
    throw Error(fmt::format("bench {}: {} events still pending after {} s; see {}", name, pending,
                            o.timeout_seconds, setup.out.string()));
  }
  const double seconds = last_mark - start_wall;
  const double rate = seconds > 0 ? static_cast<double>(o.events) / seconds : 0;
  // The backlog's own tables are large: drop them so later scenarios run on a quiet database.
  setup.drop_schema(schema);
  return {{"scenario", name},
          {"events", o.events},
          {"aggregates", o.aggregates},
          {"payload_bytes", o.payload_bytes},
          {"seconds", seconds},
          {"events_per_s", rate},
          {"relay_cpu_s_per_10k", end.cpu_seconds / static_cast<double>(o.events) * 10000.0},
          {"relay_cpu_s", end.cpu_seconds},
          {"relays", o.relays},
          {"relay_peak_rss_mib", end.peak_rss_mib}};
}

// ---------------------------------------------------------------------------------------------
// live: commit→ack latency at offered rates while a relay runs.

// The relay's PostgreSQL sessions (pg::Connection names them) in the benchmark's database.
constexpr const char* kRelaySessions =
    "FROM pg_stat_activity WHERE application_name = 'outbox-relay' AND datname = "
    "current_database()";

// Waits until no event of `schema` is pending, at most `timeout` (or until `relay` exits).
// Returns whether none is.
bool wait_published(const Setup& setup, const SchemaName& schema, const Child* relay,
                    std::chrono::seconds timeout) {
  auto c = setup.connect();
  const std::string pending_sql =
      "SELECT count(*) FROM " + schema.table("outbox_events") + " WHERE published_at IS NULL";
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (pg::exec(c.get(), pending_sql).int64(0, 0) == 0) return true;
    if (Clock::now() >= deadline || (relay != nullptr && !relay->running())) return false;
    std::this_thread::sleep_for(50ms);
  }
}

// Before each of live max's three phases: every event published, then VACUUM and CHECKPOINT, so
// each phase starts from the same state (setup, not measured). Without it the backlog a paused
// relay caught up on left its dead entries in the pending index for the next phase's claims to
// step over (the relay's session used 0.28-0.40 cores at max instead of 0.20), and the phase
// after max wrote into the previous phases' dead rows.
void settle(const Setup& setup, const SchemaName& schema, const Child& relay) {
  if (!wait_published(setup, schema, &relay, 60s)) {
    progress("live: events still pending after 60 s; the next phase starts unsettled");
  }
  auto c = setup.connect();
  pg::exec(c.get(), "VACUUM " + schema.table("outbox_events"));
  pg::exec(c.get(), "CHECKPOINT");
}

// What the producers reach alone, closed loop, in the live scenario's own schema next to `live
// max`: the relay is paused (SIGSTOP) meanwhile, then catches up before anything else runs.
// Against the producer scenario's figure (short rounds on a fresh table at the start of the run)
// this sees the same table and the same minutes of a noisy machine.
double producers_alone_here(const Setup& setup, const SchemaName& schema, Child& relay,
                            std::atomic<std::int64_t>& next_order) {
  const auto& o = setup.options;
  settle(setup, schema, relay);
  struct Paused {  // the relay resumes however this ends
    pid_t pid;
    explicit Paused(pid_t p) : pid(p) { ::kill(pid, SIGSTOP); }
    ~Paused() { ::kill(pid, SIGCONT); }
    Paused(const Paused&) = delete;
    Paused& operator=(const Paused&) = delete;
  };
  TxResult alone;
  {
    const Paused paused(relay.pid());
    auto c = setup.connect();
    // A statement the relay sent just before it stopped still runs (a heartbeat could write its
    // row back): wait until its session is idle, at most 2 s.
    for (int i = 0; i < 200; ++i) {
      if (pg::exec(c.get(),
                   std::string("SELECT count(*) ") + kRelaySessions + " AND state <> 'idle'")
              .int64(0, 0) == 0) {
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    // As if no relay ran: a relay stopped while it listened would otherwise make every commit
    // NOTIFY (nobody awake to say otherwise), which cost the producers 15-20% here. The relay
    // writes its row again when it next changes state or beats.
    pg::exec(c.get(), "DELETE FROM " + schema.table("outbox_relays"));
    alone = run_clients(setup, schema, true, o.clients, o.seconds, 0, next_order);
  }
  progress(fmt::format("live: producers alone (relay paused) {:.0f} tx/s", alone.rate()));
  return alone.rate();
}

json bench_live(const Setup& setup, double rate, const std::string& label, Child& relay,
                const SchemaName& schema, std::atomic<std::int64_t>& next_order,
                std::vector<std::pair<double, double>>& cdf) {
  const auto& o = setup.options;
  // What the relay costs the machine while producers run: its process, and (embedded database
  // only: a server elsewhere has its own process ids) its PostgreSQL session.
  auto find_relay_backend = [&]() -> std::optional<pid_t> {
    if (!o.database_url.empty()) return std::nullopt;
    auto c = setup.connect();
    const auto found = pg::exec(c.get(), std::string("SELECT pid ") + kRelaySessions);
    if (found.rows() != 1) return std::nullopt;
    return static_cast<pid_t>(found.int64(0, 0));
  };
  std::optional<pid_t> relay_backend = find_relay_backend();
  const auto relay_cpu_before = cpu_seconds_of(relay.pid());
  const double broker_cpu_before = mock_broker_cpu_seconds();
  const auto backend_cpu_before =
      relay_backend ? cpu_seconds_of(*relay_backend) : std::optional<double>();
  const auto cpu_started = Clock::now();
  std::mutex mutex;
  std::vector<std::pair<EventId, double>> committed;
  committed.reserve(static_cast<std::size_t>(rate > 0 ? rate * o.seconds * 1.1 : 100000));
  const TxResult tx = run_clients(setup, schema, true, o.clients, o.seconds, rate, next_order,
                                  [&](const EventId& id, double at) {
                                    std::lock_guard lock(mutex);
                                    committed.emplace_back(id, at);
                                  });
  const double producers_done = wall_now();
  const double cpu_elapsed = seconds_since(cpu_started);
  auto cores = [&](std::optional<pid_t> pid, std::optional<double> before) -> json {
    const auto after = pid && before ? cpu_seconds_of(*pid) : std::optional<double>();
    if (!after || cpu_elapsed <= 0) return nullptr;
    return (*after - *before) / cpu_elapsed;
  };
  const json relay_cores = cores(relay.pid(), relay_cpu_before);
  // A relay that reconnected meanwhile has another session: then the figure is unknown.
  if (find_relay_backend() != relay_backend) relay_backend.reset();
  const json relay_backend_cores = cores(relay_backend, backend_cpu_before);
  // The embedded mock broker runs in this process; a real one's CPU is on another machine.
  const json broker_cores =
      o.kafka_brokers.empty() && cpu_elapsed > 0
          ? json((mock_broker_cpu_seconds() - broker_cpu_before) / cpu_elapsed)
          : json(nullptr);
  wait_published(setup, schema, &relay, 60s);
  auto c = setup.connect();
  std::unordered_map<std::string, double> commit_time;
  pg::ArrayLiteral ids;
  double first_commit = 1e300;
  for (const auto& [id, at] : committed) {
    commit_time.emplace(id.to_string(), at);
    ids.add(id);
    first_commit = std::min(first_commit, at);
  }
  const auto rows =
      pg::exec(c.get(),
               "SELECT event_id::text, extract(epoch FROM published_at)::float8 FROM " +
                   schema.table("outbox_events") +
                   " WHERE event_id = ANY ($1::uuid[]) AND published_at IS NOT NULL",
               {ids.text().c_str()});
  std::vector<double> latencies;
  double last_published = 0;
  for (int r = 0; r < rows.rows(); ++r) {
    const double published = std::stod(std::string(rows.text(r, 1)));
    latencies.push_back((published - commit_time.at(std::string(rows.text(r, 0)))) * 1000.0);
    last_published = std::max(last_published, published);
  }
  const std::size_t unpublished = committed.size() - latencies.size();
  const Percentiles p = percentiles(latencies);
  {
    std::vector<double> sorted = latencies;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i <= 200; ++i) {
      if (sorted.empty()) break;
      const double q = static_cast<double>(i) / 200.0;
      const double v = sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1))];
      cdf.emplace_back(std::max(v, 0.01), q * 100.0);
    }
  }
  const double producer_rate = tx.rate();
  const double relay_rate = last_published > first_commit ? static_cast<double>(latencies.size()) /
                                                                (last_published - first_commit)
                                                          : 0;
  progress(
      fmt::format("live {}: {:.0f} tx/s committed, p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms",
                  label, producer_rate, p.p50, p.p99, p.max));
  return {{"scenario", "live"},
          {"offered", label},
          {"offered_per_s", rate},
          {"committed_per_s", producer_rate},
          {"relay_events_per_s", relay_rate},
          {"events", committed.size()},
          {"unpublished", unpublished},
          {"latency_p50_ms", p.p50},
          {"latency_p95_ms", p.p95},
          {"latency_p99_ms", p.p99},
          {"latency_max_ms", p.max},
          {"drained_s_after_producers", last_published - producers_done},
          {"relay_cores", relay_cores},
          {"relay_postgres_session_cores", relay_backend_cores},
          {"mock_broker_cores", broker_cores},
          {"kept_up", unpublished == 0 && relay_rate >= 0.95 * producer_rate}};
}

// ---------------------------------------------------------------------------------------------

std::string number(double value) {
  if (value >= 100) return fmt::format("{:.0f}", value);
  if (value >= 10) return fmt::format("{:.1f}", value);
  return fmt::format("{:.2f}", value);
}

void print_table(const std::vector<json>& results) {
  std::cout << "\n" << fmt::format("{:<22} {}", "scenario", "result") << "\n";
  for (const json& r : results) {
    const std::string scenario = r["scenario"];
    std::string text;
    if (scenario == "producer") {
      text = fmt::format(
          "{} clients: {} tx/s without an event (p99 {} ms), {} tx/s with one (p99 {} ms): "
          "overhead {}x",
          r["clients"].get<int>(), number(r["without_event_tx_per_s"]),
          number(r["without_event_p99_ms"]), number(r["with_event_tx_per_s"]),
          number(r["with_event_p99_ms"]), number(r["overhead_ratio"]));
    } else if (scenario == "ceiling" || scenario == "drain") {
      text = fmt::format(
          "{} events in {} s: {} events/s; relay {} CPU s per 10k events, peak RSS "
          "{} MiB{}",
          r["events"].get<std::int64_t>(), number(r["seconds"]), number(r["events_per_s"]),
          number(r["relay_cpu_s_per_10k"]), number(r["relay_peak_rss_mib"]),
          r.contains("of_ceiling")
              ? fmt::format("; {:.0f}% of the ceiling", r["of_ceiling"].get<double>() * 100)
              : "");
      if (scenario == "ceiling") text += " (sink acknowledges at once: SQL only)";
    } else if (scenario == "live") {
      text = fmt::format(
          "{} tx/s committed; commit→ack p50 {} ms, p95 {} ms, p99 {} ms, max {} ms; relay {} "
          "events/s, {}",
          number(r["committed_per_s"]), number(r["latency_p50_ms"]), number(r["latency_p95_ms"]),
          number(r["latency_p99_ms"]), number(r["latency_max_ms"]), number(r["relay_events_per_s"]),
          r["kept_up"].get<bool>() ? "kept up" : "FELL BEHIND");
      if (r.contains("of_producers_alone")) {
        text += fmt::format(" ({:.0f}% of the {} tx/s the producers reached alone around it)",
                            r["of_producers_alone"].get<double>() * 100,
                            number(r["producers_alone_per_s"]));
      }
      if (r["relay_cores"].is_number() && r["relay_postgres_session_cores"].is_number()) {
        text += fmt::format("; relay used {:.2f} cores, its PostgreSQL session {:.2f}",
                            r["relay_cores"].get<double>(),
                            r["relay_postgres_session_cores"].get<double>());
        if (r["mock_broker_cores"].is_number()) {
          text += fmt::format(", the mock broker {:.2f}", r["mock_broker_cores"].get<double>());
        }
      }
    }
    const std::string name =
        scenario == "live" ? "live " + r["offered"].get<std::string>() : scenario;
    std::cout << fmt::format("{:<22} {}", name, text) << "\n";
  }
  std::cout << std::endl;
}

// What the figures were measured on: they mean little without it.
json machine(const Setup& setup) {
  std::string cpu = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  long memory_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemTotal:", 0) == 0) memory_kib = std::stol(line.substr(9));
  }
  auto c = setup.connect();
  const auto settings =
      pg::exec(c.get(),
               "SELECT current_setting('server_version'), current_setting('fsync'),"
               " current_setting('synchronous_commit'), current_setting('shared_buffers')");
  return {{"scenario", "machine"},
          {"cpus", std::thread::hardware_concurrency()},
          {"cpu", cpu},
          {"memory_gib", static_cast<double>(memory_kib) / 1048576.0},
          {"postgresql", std::string(settings.text(0, 0))},
          {"fsync", std::string(settings.text(0, 1))},
          {"synchronous_commit", std::string(settings.text(0, 2))},
          {"shared_buffers", std::string(settings.text(0, 3))},
          {"librdkafka", rd_kafka_version_str()},
          {"kafka", setup.kafka ? "librdkafka mock cluster, 1 broker, in the bench process"
                                : setup.brokers}};
}

bool wanted(const BenchOptions& o, const std::string& scenario) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), scenario) != o.only.end();
}

}  // namespace

int run_bench(const BenchOptions& options) {
  if (options.events < 1 || options.aggregates < 1 || options.clients < 1 || options.seconds <= 0) {
    throw InvalidArgument(
        "bench: --events, --aggregates, --clients and --seconds must be positive");
  }
  for (const std::string& s : options.only) {
    if (s != "producer" && s != "ceiling" && s != "drain" && s != "live") {
      throw InvalidArgument("bench: unknown scenario \"" + s +
                            "\"; use producer, ceiling, drain or live");
    }
  }
  spdlog::set_level(spdlog::level::warn);
  std::filesystem::create_directories(options.out_dir);
  // Sized as a tuned server would be (a quarter of the memory is the usual advice), not at
  // initdb's 128MB: a backlog of 1,000,000 events with the versions the relay leaves is ~1 GB.
  EmbeddedPostgresOptions pg_options;
  pg_options.shared_buffers = options.shared_buffers;
  Servers servers(options.database_url, options.kafka_brokers, pg_options, 1,
                  [](const std::string& text) { progress(text); });
  const std::string& url = servers.database_url();
  const std::string& brokers = servers.brokers();
  const Setup setup{options,         url,
                    brokers,         std::filesystem::canonical("/proc/self/exe").string(),
                    options.out_dir, servers.kafka()};
  std::vector<json> results;
  auto report = [&](json r) {
    std::cout << r.dump() << std::endl;
    results.push_back(std::move(r));
  };
  const json about = machine(setup);
  std::cout << about.dump() << std::endl;

  std::optional<double> producers_alone;
  if (wanted(options, "producer")) {
    json r = bench_producer(setup);
    producers_alone = r["with_event_tx_per_s"].get<double>();
    report(r);
  }
  Chart throughput{"Backlog drain: events published per second",
                   "seconds since the relay started",
                   "events/s",
                   false,
                   {}};
  std::optional<double> ceiling;
  if (wanted(options, "ceiling")) {
    Series s{"SQL only (sink acknowledges at once)", {}};
    json r = bench_backlog(setup, true, s.points);
    ceiling = r["events_per_s"].get<double>();
    throughput.series.push_back(std::move(s));
    report(r);
  }
  if (wanted(options, "drain")) {
    Series s{"through Kafka", {}};
    json r = bench_backlog(setup, false, s.points);
    if (ceiling) r["of_ceiling"] = r["events_per_s"].get<double>() / *ceiling;
    throughput.series.push_back(std::move(s));
    report(r);
  }
  if (!throughput.series.empty()) {
    write_svg((std::filesystem::path(options.out_dir) / "drain-throughput.svg").string(),
              throughput);
  }
  if (wanted(options, "live")) {
    const SchemaName schema = setup.fresh_schema("bench_live");
    Child relay(setup.relay_args(schema, false),
                (std::filesystem::path(options.out_dir) / "relay-live.log").string());
    std::atomic<std::int64_t> next_order{1};
    // Warm up (connections, the topic's metadata, plans): the steady state is what is measured.
    run_clients(setup, schema, true, 1, 1.0, 50, next_order);
    wait_published(setup, schema, &relay, 30s);
    Chart latency{"Commit to broker ack (upper bound: published_at of the mark)",
                  "latency, ms (log scale)",
                  "percent of events at or below",
                  true,
                  {}};
    std::vector<std::pair<double, std::string>> rates;
    for (const int rate : options.rates) rates.emplace_back(rate, fmt::format("{}/s", rate));
    rates.emplace_back(0, "max");
    for (const auto& [rate, label] : rates) {
      Series s{label, {}};
      // Max is bracketed by the producers alone, before and after, so drift (autovacuum,
      // checkpoints, the neighbours of a shared machine) falls on both sides.
      const double alone_before =
          rate == 0 ? producers_alone_here(setup, schema, relay, next_order) : 0;
      if (rate == 0) settle(setup, schema, relay);
      json r = bench_live(setup, rate, label, relay, schema, next_order, s.points);
      if (rate == 0) {
        const double alone_after = producers_alone_here(setup, schema, relay, next_order);
        const double alone_here = (alone_before + alone_after) / 2;
        r["producers_alone_before_per_s"] = alone_before;
        r["producers_alone_after_per_s"] = alone_after;
        // Kept up: with at least 95% of what the producers reach alone around it.
        r["producers_alone_per_s"] = alone_here;
        r["of_producers_alone"] =
            alone_here > 0 ? r["committed_per_s"].get<double>() / alone_here : 0;
        r["kept_up"] = r["unpublished"].get<std::size_t>() == 0 &&
                       r["relay_events_per_s"].get<double>() >= 0.95 * alone_here;
        if (producers_alone) {
          r["producer_scenario_per_s"] = *producers_alone;
          r["of_producer_scenario"] = r["committed_per_s"].get<double>() / *producers_alone;
        }
      }
      latency.series.push_back(std::move(s));
      report(r);
    }
    relay.stop();
    setup.drop_schema(schema);
    write_svg((std::filesystem::path(options.out_dir) / "live-latency.svg").string(), latency);
  }
  print_table(results);
  std::cout << fmt::format(
                   "machine: {} x {}, {:.0f} GiB; PostgreSQL {} (fsync {}, shared_buffers "
                   "{}); librdkafka {}; Kafka: {}",
                   about["cpus"].get<unsigned>(), about["cpu"].get<std::string>(),
                   about["memory_gib"].get<double>(), about["postgresql"].get<std::string>(),
                   about["fsync"].get<std::string>(), about["shared_buffers"].get<std::string>(),
                   about["librdkafka"].get<std::string>(), about["kafka"].get<std::string>())
            << std::endl;
  std::ofstream file(std::filesystem::path(options.out_dir) / "results.json");
  json everything = results;
  everything.push_back(about);
  file << everything.dump(2) << "\n";
  std::cout << "results, plots and relay logs: " << options.out_dir << "/" << std::endl;
  return 0;
}

}  // namespace outbox::cli
