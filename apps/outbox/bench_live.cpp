// `outbox bench`: live, commit→ack latency at offered rates while a relay process runs.

#include <fmt/format.h>

#include <algorithm>
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

// What the producers reach alone, closed loop, in the live scenario's own schema next to `live
// max`: the relay is paused (SIGSTOP) meanwhile, then catches up before anything else runs.
// Against the producer scenario's figure (short rounds on a fresh table at the start of the run)
// this sees the same table and the same minutes of a noisy machine.
double producers_alone_here(const Setup& setup, const SchemaName& schema, Child& relay,
                            std::atomic<std::int64_t>& next_order) {
  const auto& o = setup.options;
  settle(setup, schema, relay);
  TxResult alone;
  {
    const Paused paused(relay.pid());
    auto c = setup.connect();
    // A statement the relay sent just before it stopped still runs (a heartbeat could write its
    // row back): wait until its session is idle, at most 2 s.
    for (int i = 0; i < 200 && !relay_sessions_idle(c.get()); ++i) {
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

// What the relay costs the machine while producers run: its process, its PostgreSQL session
// (embedded database only: a server elsewhere has its own process ids) and the embedded mock
// broker (in this process; a real one's CPU is on another machine), in cores.
class CpuMeter {
 public:
  CpuMeter(const Setup& setup, const Child& relay) : setup_(setup), relay_(relay.pid()) {
    backend_ = find_backend();
    relay_before_ = cpu_seconds_of(relay_);
    broker_before_ = mock_broker_cpu_seconds();
    backend_before_ = backend_ ? cpu_seconds_of(*backend_) : std::optional<double>();
    started_ = Clock::now();
  }

  // {relay_cores, relay_postgres_session_cores, mock_broker_cores}, null where unknown.
  json cores() {
    elapsed_ = seconds_since(started_);
    json result = {{"relay_cores", cores_of(relay_, relay_before_)}};
    // A relay that reconnected meanwhile has another session: then the figure is unknown.
    if (find_backend() != backend_) backend_.reset();
    result["relay_postgres_session_cores"] = cores_of(backend_, backend_before_);
    result["mock_broker_cores"] =
        setup_.options.kafka_brokers.empty() && elapsed_ > 0
            ? json((mock_broker_cpu_seconds() - broker_before_) / elapsed_)
            : json(nullptr);
    return result;
  }

 private:
  std::optional<pid_t> find_backend() const {
    if (!setup_.options.database_url.empty()) return std::nullopt;
    auto c = setup_.connect();
    return relay_session_pid(c.get());
  }
  json cores_of(std::optional<pid_t> pid, std::optional<double> before) const {
    const auto after = pid && before ? cpu_seconds_of(*pid) : std::optional<double>();
    if (!after || elapsed_ <= 0) return nullptr;
    return (*after - *before) / elapsed_;
  }

  const Setup& setup_;
  pid_t relay_;
  std::optional<pid_t> backend_;
  std::optional<double> relay_before_;
  double broker_before_ = 0;
  std::optional<double> backend_before_;
  Clock::time_point started_;
  double elapsed_ = 0;
};

struct Latencies {
  std::vector<double> ms;  // commit → published_at, per published event
  double first_commit = 1e300;
  double last_published = 0;
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
  const auto rows =
      pg::exec(c.get(),
               "SELECT event_id::text, extract(epoch FROM published_at)::float8 FROM " +
                   schema.table("outbox_events") +
                   " WHERE event_id = ANY ($1::uuid[]) AND published_at IS NOT NULL",
               {ids.text().c_str()});
  for (int r = 0; r < rows.rows(); ++r) {
    const double published = std::stod(std::string(rows.text(r, 1)));
    result.ms.push_back((published - commit_time.at(std::string(rows.text(r, 0)))) * 1000.0);
    result.last_published = std::max(result.last_published, published);
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

struct LiveRun {
  const Setup& setup;
  const SchemaName& schema;
  Child& relay;
  std::atomic<std::int64_t>& next_order;
};

json live_rate(const LiveRun& live, double rate, const std::string& label,
               std::vector<std::pair<double, double>>& points) {
  const auto& o = live.setup.options;
  CpuMeter meter(live.setup, live.relay);
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
  wait_published(live.setup, live.schema, &live.relay, 60s);
  const Latencies latencies = commit_latencies(live.setup, live.schema, committed);
  const std::size_t unpublished = committed.size() - latencies.ms.size();
  const Percentiles p = percentiles(latencies.ms);
  points = cdf(latencies.ms);
  const double producer_rate = tx.rate();
  const double span = latencies.last_published - latencies.first_commit;
  const double relay_rate = span > 0 ? static_cast<double>(latencies.ms.size()) / span : 0;
  progress(
      fmt::format("live {}: {:.0f} tx/s committed, p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms",
                  label, producer_rate, p.p50, p.p99, p.max));
  result.update({{"scenario", "live"},
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
                 {"drained_s_after_producers", latencies.last_published - producers_done},
                 {"kept_up", unpublished == 0 && relay_rate >= 0.95 * producer_rate}});
  return result;
}

// live max, bracketed by the producers alone before and after, so drift (autovacuum,
// checkpoints, the neighbours of a shared machine) falls on both sides.
json live_max(const LiveRun& live, std::optional<double> producer_scenario_per_s,
              std::vector<std::pair<double, double>>& points) {
  const double alone_before =
      producers_alone_here(live.setup, live.schema, live.relay, live.next_order);
  settle(live.setup, live.schema, live.relay);
  json r = live_rate(live, 0, "max", points);
  const double alone_after =
      producers_alone_here(live.setup, live.schema, live.relay, live.next_order);
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

void bench_live(const Setup& setup, std::optional<double> producer_scenario_per_s,
                const std::function<void(json)>& report, Chart& latency) {
  const SchemaName schema = setup.fresh_schema("bench_live");
  Child relay(setup.relay_args(schema, false), (setup.out / "relay-live.log").string());
  std::atomic<std::int64_t> next_order{1};
  // Warm up (connections, the topic's metadata, plans): the steady state is what is measured.
  run_clients(setup, schema, true, 1, 1.0, 50, next_order);
  wait_published(setup, schema, &relay, 30s);
  const LiveRun live{setup, schema, relay, next_order};
  for (const int rate : setup.options.rates) {
    Series s{fmt::format("{}/s", rate), {}};
    json r = live_rate(live, rate, s.name, s.points);
    latency.series.push_back(std::move(s));
    report(std::move(r));
  }
  Series s{"max", {}};
  json r = live_max(live, producer_scenario_per_s, s.points);
  latency.series.push_back(std::move(s));
  report(std::move(r));
  relay.stop();
  setup.drop_schema(schema);
}

}  // namespace outbox::cli::bench
