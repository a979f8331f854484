// `outbox-dev bench`: live, commit→ack latency at offered rates while a relay process runs.

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bench_clients.hpp"
#include "bench_processes.hpp"
#include "bench_scenarios.hpp"
#include "pg/array_literal.hpp"

namespace outbox::cli::bench {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

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

// The live scenario's relay process, polling or CDC (one relay: a second CDC relay would wait
// for the slot as a standby). Its log is relay-live[-cdc][-N].log, N counting restarts.
class LiveRelay {
 public:
  LiveRelay(const Setup& setup, const SchemaName& schema, RelaySource source)
      : setup_(setup), schema_(schema), source_(source) {
    start();
  }
  [[nodiscard]] RelaySource source() const { return source_; }
  [[nodiscard]] Child& process() const { return *child_; }
  void start() {
    ++starts_;
    const std::string log =
        fmt::format("relay-live{}{}.log", source_ == RelaySource::cdc ? "-cdc" : "",
                    starts_ > 1 ? fmt::format("-{}", starts_) : "");
    child_ = std::make_unique<Child>(setup_.relay_args(schema_, false, 0, source_),
                                     (setup_.out / log).string());
  }
  void stop() { child_->stop(); }

 private:
  const Setup& setup_;
  const SchemaName& schema_;
  RelaySource source_;
  int starts_ = 0;
  std::unique_ptr<Child> child_;
};

struct LiveRun {
  const Setup& setup;
  const SchemaName& schema;
  LiveRelay& relay;
  std::atomic<std::int64_t>& next_order;
};

// A polling relay is paused (SIGSTOP) while the producers run alone, then catches up.
TxResult alone_with_relay_paused(const LiveRun& live) {
  const Paused paused(live.relay.process().pid());
  auto c = live.setup.connect();
  // A statement the relay sent just before it stopped still runs (a heartbeat could write its
  // row back): wait until its session is idle, at most 2 s.
  for (int i = 0; i < 200 && !relay_sessions_idle(c.get()); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  // As if no relay ran: a relay stopped while it listened would otherwise make every commit
  // NOTIFY (nobody awake to say otherwise), which cost the producers 15-20% here. The relay
  // writes its row again when it next changes state or beats.
  pg::exec(c.get(), "DELETE FROM " + live.schema.table("outbox_relays"));
  return run_clients(live.setup, live.schema, true, live.setup.options.clients,
                     live.setup.options.seconds, 0, live.next_order);
}

// A CDC relay is stopped instead (it removes its outbox_relays row) and started again after:
// paused past its takeover time (5 s) the server would end its stream. Meanwhile nothing decodes
// the WAL, and the slot keeps what the producers write for the relay to catch up on.
TxResult alone_without_cdc_relay(const LiveRun& live) {
  live.relay.stop();
  TxResult alone = run_clients(live.setup, live.schema, true, live.setup.options.clients,
                               live.setup.options.seconds, 0, live.next_order);
  live.relay.start();
  return alone;
}

// What the producers reach alone, closed loop, in the live scenario's own schema next to `live
// max`; the relay catches up before anything else runs. Against the producer scenario's figure
// (short rounds on a fresh table at the start of the run) this sees the same table and the same
// minutes of a noisy machine.
double producers_alone_here(const LiveRun& live) {
  settle(live.setup, live.schema, live.relay.process());
  const TxResult alone = live.relay.source() == RelaySource::cdc ? alone_without_cdc_relay(live)
                                                                 : alone_with_relay_paused(live);
  progress(fmt::format(
      "live {}: producers alone (relay {}) {:.0f} tx/s", source_name(live.relay.source()),
      live.relay.source() == RelaySource::cdc ? "stopped" : "paused", alone.rate()));
  return alone.rate();
}

// What the relay costs the machine while producers run: its process, its PostgreSQL sessions
// (a CDC relay's walsender among them; embedded database only: a server elsewhere has its own
// process ids) and the embedded broker (the mock in this process, or the server it started; a
// broker of the user's has its CPU on another machine), in cores.
class CpuMeter {
 public:
  CpuMeter(const Setup& setup, const Child& relay)
      : setup_(setup),
        relay_(relay.pid()),
        relay_before_(cpu_seconds_of(relay_)),
        broker_before_(broker_cpu_seconds(setup_.broker_group)),
        sessions_(setup),
        started_(Clock::now()) {}

  // {relay_cores, relay_postgres_session_cores (all its sessions), relay_walsender_cores (of
  // those), broker_cores}, null where unknown.
  json cores() {
    const double elapsed = seconds_since(started_);
    sessions_.sample();
    const auto relay_after = cpu_seconds_of(relay_);
    const auto per_second = [&](double seconds) {
      return elapsed > 0 ? json(seconds / elapsed) : json(nullptr);
    };
    json result = {{"relay_cores", nullptr},
                   {"relay_postgres_session_cores", nullptr},
                   {"relay_walsender_cores", nullptr},
                   {"broker_cores", nullptr}};
    if (relay_before_ && relay_after)
      result["relay_cores"] = per_second(*relay_after - *relay_before_);
    if (sessions_.known()) {
      result["relay_postgres_session_cores"] = per_second(sessions_.seconds());
      result["relay_walsender_cores"] = per_second(sessions_.walsender_seconds());
    }
    if (setup_.options.kafka_brokers.empty()) {
      result["broker_cores"] = per_second(broker_cpu_seconds(setup_.broker_group) - broker_before_);
    }
    return result;
  }

 private:
  const Setup& setup_;
  pid_t relay_;
  std::optional<double> relay_before_;
  double broker_before_;
  RelaySessionsCpu sessions_;
  Clock::time_point started_;
};

// Relay, sessions and broker together, per event the relay published: microseconds of CPU.
json relay_side_us_per_event(const json& cores, double events_per_s) {
  double total = 0;
  for (const char* key : {"relay_cores", "relay_postgres_session_cores", "broker_cores"}) {
    if (!cores[key].is_number()) return nullptr;
    total += cores[key].get<double>();
  }
  return events_per_s > 0 ? json(total / events_per_s * 1e6) : json(nullptr);
}

struct Latencies {
  std::vector<double> ms;  // commit → published_at, per published event
  double first_commit = 1e300;
  double last_published = 0;
  // Published events a relay's claim took (claimed_by set): all with polling; with CDC the ones
  // the stream did not bring, and the slowest of them.
  std::size_t by_claim = 0;
  double by_claim_max_ms = 0;
};

// Each committed event's latency from its commit (wall time) to its published_at.
Latencies commit_latencies(const Setup& setup, const SchemaName& schema,
                           const std::vector<std::pair<EventId, double>>& committed) {
  auto c = setup.connect();
  Latencies result;
  std::unordered_map<std::string, double> commit_time;
  pg::ArrayLiteral ids;
  for (const auto& [id, at] : committed) {
    commit_time.emplace(id.to_string(), at);
    ids.add(id);
    result.first_commit = std::min(result.first_commit, at);
  }
  const auto rows = pg::exec(c.get(),
                             "SELECT event_id::text, extract(epoch FROM published_at)::float8,"
                             " claimed_by IS NOT NULL FROM " +
                                 schema.table("outbox_events") +
                                 " WHERE event_id = ANY ($1::uuid[]) AND published_at IS NOT NULL",
                             {ids.text().c_str()});
  for (int r = 0; r < rows.rows(); ++r) {
    const double published = std::stod(std::string(rows.text(r, 1)));
    const double ms = (published - commit_time.at(std::string(rows.text(r, 0)))) * 1000.0;
    result.ms.push_back(ms);
    result.last_published = std::max(result.last_published, published);
    if (rows.text(r, 2) == "t") {
      ++result.by_claim;
      result.by_claim_max_ms = std::max(result.by_claim_max_ms, ms);
    }
  }
  return result;
}

// The latency distribution as 201 (ms, percent at or below) points.
std::vector<std::pair<double, double>> cdf(std::vector<double> sorted) {
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i <= 200 && !sorted.empty(); ++i) {
    const double q = static_cast<double>(i) / 200.0;
    const double v = sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1))];
    points.emplace_back(std::max(v, 0.01), q * 100.0);
  }
  return points;
}

json live_rate(const LiveRun& live, double rate, const std::string& label,
               std::vector<std::pair<double, double>>& points) {
  const auto& o = live.setup.options;
  CpuMeter meter(live.setup, live.relay.process());
  std::mutex mutex;
  std::vector<std::pair<EventId, double>> committed;
  committed.reserve(static_cast<std::size_t>(rate > 0 ? rate * o.seconds * 1.1 : 100000));
  const TxResult tx = run_clients(live.setup, live.schema, true, o.clients, o.seconds, rate,
                                  live.next_order, [&](const EventId& id, double at) {
                                    std::lock_guard lock(mutex);
                                    committed.emplace_back(id, at);
                                  });
  const double producers_done = wall_now();
  json result = meter.cores();
  wait_published(live.setup, live.schema, &live.relay.process(), 60s);
  const Latencies latencies = commit_latencies(live.setup, live.schema, committed);
  const std::size_t unpublished = committed.size() - latencies.ms.size();
  const Percentiles p = percentiles(latencies.ms);
  points = cdf(latencies.ms);
  const double producer_rate = tx.rate();
  const double span = latencies.last_published - latencies.first_commit;
  const double relay_rate = span > 0 ? static_cast<double>(latencies.ms.size()) / span : 0;
  progress(
      fmt::format("live {} {}: {:.0f} tx/s committed, p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms",
                  source_name(live.relay.source()), label, producer_rate, p.p50, p.p99, p.max));
  result["relay_side_cpu_us_per_event"] = relay_side_us_per_event(result, relay_rate);
  result.update({{"scenario", "live"},
                 {"source", source_name(live.relay.source())},
                 {"relays", 1},
                 {"cdc_shards", live.relay.source() == RelaySource::cdc ? o.cdc_shards : 0U},
                 {"offered", label},
                 {"offered_per_s", rate},
                 {"committed_per_s", producer_rate},
                 {"relay_events_per_s", relay_rate},
                 {"events", committed.size()},
                 {"unpublished", unpublished},
                 {"published_by_claim", latencies.by_claim},
                 {"published_by_claim_max_ms", latencies.by_claim_max_ms},
                 {"latency_p50_ms", p.p50},
                 {"latency_p95_ms", p.p95},
                 {"latency_p99_ms", p.p99},
                 {"latency_max_ms", p.max},
                 {"drained_s_after_producers", latencies.last_published - producers_done},
                 {"kept_up", unpublished == 0 && relay_rate >= 0.95 * producer_rate}});
  return result;
}

// live max, bracketed by the producers alone before and after, so drift (autovacuum,
// checkpoints, the neighbours of a shared machine) falls on both sides.
json live_max(const LiveRun& live, std::optional<double> producer_scenario_per_s,
              std::vector<std::pair<double, double>>& points) {
  const double alone_before = producers_alone_here(live);
  settle(live.setup, live.schema, live.relay.process());
  json r = live_rate(live, 0, "max", points);
  const double alone_after = producers_alone_here(live);
  const double alone_here = (alone_before + alone_after) / 2;
  r["producers_alone_before_per_s"] = alone_before;
  r["producers_alone_after_per_s"] = alone_after;
  // Kept up: with at least 95% of what the producers reach alone around it.
  r["producers_alone_per_s"] = alone_here;
  r["of_producers_alone"] = alone_here > 0 ? r["committed_per_s"].get<double>() / alone_here : 0;
  r["kept_up"] = r["unpublished"].get<std::size_t>() == 0 &&
                 r["relay_events_per_s"].get<double>() >= 0.95 * alone_here;
  if (producer_scenario_per_s) {
    r["producer_scenario_per_s"] = *producer_scenario_per_s;
    r["of_producer_scenario"] = r["committed_per_s"].get<double>() / *producer_scenario_per_s;
  }
  return r;
}

}  // namespace

void bench_live(const Setup& setup, RelaySource source,
                std::optional<double> producer_scenario_per_s,
                const std::function<void(json)>& report, Chart& latency) {
  const bool cdc = source == RelaySource::cdc;
  const SchemaName schema = setup.fresh_schema(cdc ? "bench_live_cdc" : "bench_live");
  // The slot first: what is committed before it exists is left to the relay's own claim, once it
  // is older than the horizon (10 s).
  if (cdc) setup.create_slot(schema);
  LiveRelay relay(setup, schema, source);
  std::atomic<std::int64_t> next_order{1};
  // Warm up (connections, the topic's metadata, plans): the steady state is what is measured.
  run_clients(setup, schema, true, 1, 1.0, 50, next_order);
  wait_published(setup, schema, &relay.process(), 30s);
  const LiveRun live{setup, schema, relay, next_order};
  for (const int rate : setup.options.rates) {
    const std::string label = fmt::format("{}/s", rate);
    Series s{fmt::format("{} {}", source_name(source), label), {}};
    json r = live_rate(live, rate, label, s.points);
    latency.series.push_back(std::move(s));
    report(std::move(r));
  }
  Series s{fmt::format("{} max", source_name(source)), {}};
  json r = live_max(live, producer_scenario_per_s, s.points);
  latency.series.push_back(std::move(s));
  report(std::move(r));
  relay.stop();
  setup.drop_schema(schema);
}

}  // namespace outbox::cli::bench
