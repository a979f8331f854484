// `outbox-dev bench`: the producer scenario, and ceiling and drain (a backlog through relay
// processes).

#include "bench_scenarios.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "bench_clients.hpp"
#include "bench_processes.hpp"
#include "outbox/error.hpp"

namespace outbox::cli::bench {

using namespace std::chrono_literals;
using nlohmann::json;

json bench_producer(const Setup& setup) {
  const auto& o = setup.options;
  const SchemaName schema = setup.fresh_schema("bench_producer");
  std::atomic<std::int64_t> next_order{1};
  // Table-less events need wal_level = logical and a registered slot; the slot is made here and
  // read by no one while the producers run (as no relay runs beside the table producers either).
  bool table_less = false;
  {
    auto c = setup.connect();
    if (pg::exec(c.get(), "SHOW wal_level").text(0, 0) == "logical") {
      const std::string slot = Setup::slot_name(schema);
      pg::exec(c.get(), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
               {slot.c_str()});
      pg::exec(c.get(),
               "INSERT INTO " + schema.table("outbox_table_less_slots") +
                   " (slot_name, relay_id) VALUES ($1, 'bench')",
               {slot.c_str()});
      table_less = true;
    } else {
      progress("producer: wal_level is not logical: no table-less figures");
    }
  }
  enum Kind { kWithout, kTable, kTableLess };
  std::vector<Kind> kinds{kWithout, kTable};
  if (table_less) kinds.push_back(kTableLess);
  const auto run = [&](Kind kind, double seconds) {
    return run_clients(setup, schema, kind != kWithout, o.clients, seconds, 0, next_order, {},
                       kind == kTableLess);
  };
  // Warm up every path (connections, plans, caches), then alternate rounds so drift and noise on
  // a shared machine fall on each alike.
  for (const Kind kind : kinds) run(kind, 1.0);
  TxResult results[3];
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    for (const Kind kind : kinds) {
      TxResult r = run(kind, o.seconds / kRounds);
      TxResult& into = results[kind];
      into.transactions += r.transactions;
      into.seconds += r.seconds;
      into.latencies_ms.insert(into.latencies_ms.end(), r.latencies_ms.begin(),
                               r.latencies_ms.end());
    }
    progress(fmt::format(
        "producer: round {}/{}: {:.0f} tx/s without, {:.0f} tx/s with an event{}", round + 1,
        kRounds, results[kWithout].rate(), results[kTable].rate(),
        table_less ? fmt::format(", {:.0f} tx/s with a table-less one", results[kTableLess].rate())
                   : std::string()));
  }
  const TxResult& without = results[kWithout];
  const TxResult& with = results[kTable];
  const Percentiles a = percentiles(without.latencies_ms);
  const Percentiles b = percentiles(with.latencies_ms);
  setup.drop_schema(
      schema);  // its ~100,000 unpublished events: autovacuum work for later scenarios
  json r{{"scenario", "producer"},
         {"clients", o.clients},
         {"without_event_tx_per_s", without.rate()},
         {"with_event_tx_per_s", with.rate()},
         {"overhead_ratio", with.rate() > 0 ? without.rate() / with.rate() : 0},
         {"without_event_p50_ms", a.p50},
         {"without_event_p99_ms", a.p99},
         {"with_event_p50_ms", b.p50},
         {"with_event_p99_ms", b.p99}};
  if (table_less) {
    const TxResult& less = results[kTableLess];
    const Percentiles c = percentiles(less.latencies_ms);
    r["table_less_tx_per_s"] = less.rate();
    r["table_less_overhead_ratio"] = less.rate() > 0 ? without.rate() / less.rate() : 0;
    r["table_less_p50_ms"] = c.p50;
    r["table_less_p99_ms"] = c.p99;
  }
  return r;
}

namespace {

// Until the relays published the whole backlog (by their stats), one exited, or the timeout;
// returns the seconds since `started` at the sample that saw the last event published.
double watch_backlog(const Setup& setup, const std::string& name,
                     std::vector<std::unique_ptr<RelayProcess>>& relays, Clock::time_point started,
                     RelaySessionsCpu& sessions, std::vector<std::pair<double, double>>& curve) {
  const auto& o = setup.options;
  std::uint64_t last = 0;
  double last_t = 0;
  auto last_print = Clock::now();
  const auto deadline = started + std::chrono::seconds(o.timeout_seconds);
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(250ms);
    sessions.sample();
    std::uint64_t published = 0;
    for (const auto& r : relays) published += r->published();
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
    if (published >= static_cast<std::uint64_t>(o.events)) return t;
    for (const auto& r : relays) {
      if (!r->running()) {
        throw Error(fmt::format("bench {}: a relay exited with {}/{} events published; its log: {}",
                                name, published, o.events, r->log_path()));
      }
    }
  }
  throw Error(fmt::format("bench {}: not published within {} s; see {}", name, o.timeout_seconds,
                          setup.out.string()));
}

// Seconds from `start_wall` to the last mark; throws if an event is still pending.
double backlog_seconds(const Setup& setup, const std::string& name, const SchemaName& schema,
                       double start_wall) {
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
                            setup.options.timeout_seconds, setup.out.string()));
  }
  return last_mark - start_wall;
}

// What the relay side used draining `events`: the relay processes (rusage), their PostgreSQL
// sessions with a CDC relay's walsender, and the embedded broker; CPU seconds per 10,000.
json backlog_cpu(const Setup& setup, const Child::End& relays, const RelaySessionsCpu& sessions,
                 double broker_seconds) {
  const double per_10k = 10000.0 / static_cast<double>(setup.options.events);
  json cpu = {{"relay_cpu_s_per_10k", relays.cpu_seconds * per_10k},
              {"relay_cpu_s", relays.cpu_seconds},
              {"postgres_sessions_cpu_s_per_10k", nullptr},
              {"walsender_cpu_s_per_10k", nullptr},
              {"broker_cpu_s_per_10k", nullptr},
              {"relay_side_cpu_s_per_10k", nullptr}};
  if (!sessions.known()) return cpu;
  cpu["postgres_sessions_cpu_s_per_10k"] = sessions.seconds() * per_10k;
  cpu["walsender_cpu_s_per_10k"] = sessions.walsender_seconds() * per_10k;
  double total = relays.cpu_seconds + sessions.seconds();
  if (setup.options.kafka_brokers.empty()) {
    cpu["broker_cpu_s_per_10k"] = broker_seconds * per_10k;
    total += broker_seconds;
  }
  cpu["relay_side_cpu_s_per_10k"] = total * per_10k;
  return cpu;
}

}  // namespace

json bench_backlog(const Setup& setup, bool discard, RelaySource source,
                   std::vector<std::pair<double, double>>& curve) {
  const auto& o = setup.options;
  const bool cdc = source == RelaySource::cdc;
  const std::string name = discard ? "ceiling" : "drain";
  const std::string label = name + (cdc ? " cdc" : "");
  const SchemaName schema = setup.fresh_schema("bench_" + name + (cdc ? "_cdc" : ""));
  if (cdc) setup.create_slot(schema);  // the slot keeps what is written while no relay runs
  setup.load_backlog(schema);
  // One CDC relay: a second would wait for the slot as a standby.
  const int relay_count = cdc ? 1 : o.relays;
  const double broker_before = broker_cpu_seconds(setup.broker_group);
  RelaySessionsCpu sessions(setup);
  const double start_wall = wall_now();
  const auto started = Clock::now();
  std::vector<std::unique_ptr<RelayProcess>> relays;
  for (int i = 0; i < relay_count; ++i) {
    relays.push_back(std::make_unique<RelayProcess>(
        setup.relay_args(schema, discard, i, source),
        (setup.out / fmt::format("relay-{}{}-{}.log", name, cdc ? "-cdc" : "", i + 1)).string()));
  }
  (void)watch_backlog(setup, label, relays, started, sessions, curve);
  sessions.sample();
  Child::End end;
  for (auto& r : relays) {
    const Child::End one = r->stop();
    end.cpu_seconds += one.cpu_seconds;
    end.peak_rss_mib = std::max(end.peak_rss_mib, one.peak_rss_mib);
  }
  const double broker_seconds = broker_cpu_seconds(setup.broker_group) - broker_before;
  const double seconds = backlog_seconds(setup, label, schema, start_wall);
  const double rate = seconds > 0 ? static_cast<double>(o.events) / seconds : 0;
  // The backlog's own tables are large: drop them so later scenarios run on a quiet database.
  setup.drop_schema(schema);
  json result = {{"scenario", name},
                 {"source", source_name(source)},
                 {"events", o.events},
                 {"aggregates", o.aggregates},
                 {"payload_bytes", o.payload_bytes},
                 {"seconds", seconds},
                 {"events_per_s", rate},
                 {"relays", relay_count},
                 {"cdc_shards", cdc ? o.cdc_shards : 0U},
                 {"relay_peak_rss_mib", end.peak_rss_mib}};
  result.update(backlog_cpu(setup, end, sessions, broker_seconds));
  return result;
}

json bench_table_less(const Setup& setup, std::vector<std::pair<double, double>>& curve) {
  const auto& o = setup.options;
  const SchemaName schema = setup.fresh_schema("bench_table_less");
  setup.create_slot(schema, true);  // made and registered for table-less events, then stopped
  setup.load_table_less_backlog(schema);
  const double broker_before = broker_cpu_seconds(setup.broker_group);
  RelaySessionsCpu sessions(setup);
  const auto started = Clock::now();
  std::vector<std::unique_ptr<RelayProcess>> relays;
  relays.push_back(
      std::make_unique<RelayProcess>(setup.relay_args(schema, false, 0, RelaySource::cdc, true),
                                     (setup.out / "relay-table-less.log").string()));
  const double seconds = watch_backlog(setup, "table-less", relays, started, sessions, curve);
  sessions.sample();
  const Child::End end = relays.front()->stop();
  const double broker_seconds = broker_cpu_seconds(setup.broker_group) - broker_before;
  // Events the relay wrote to the table to publish from there (a failed send, a transaction over
  // its byte budget): none is expected here.
  const long long materialized =
      pg::exec(setup.connect().get(), "SELECT count(*) FROM " + schema.table("outbox_events"))
          .int64(0, 0);
  setup.drop_schema(schema);
  json result = {{"scenario", "table-less"},
                 {"source", "cdc"},
                 {"events", o.events},
                 {"aggregates", o.aggregates},
                 {"payload_bytes", o.payload_bytes},
                 {"seconds", seconds},
                 {"events_per_s", seconds > 0 ? static_cast<double>(o.events) / seconds : 0},
                 {"relays", 1},
                 {"cdc_shards", 1},
                 {"materialized", materialized},
                 {"relay_peak_rss_mib", end.peak_rss_mib}};
  result.update(backlog_cpu(setup, end, sessions, broker_seconds));
  return result;
}

}  // namespace outbox::cli::bench
