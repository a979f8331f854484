// The HTTP sink under faults (docs/GUARANTEES.md, "An HTTP destination"): two `outbox relay
// --sink http` processes deliver a steady stream of events to the campaign's own receiver
// (outbox::testing's HttpReceiver, in this process), while trials in turn
//   - kill a relay between the endpoint's 2xx and the mark (fault relay.after_ack_before_mark),
//   - take the receiver down and bring it back on the same port,
//   - make the receiver slower than the relays' request timeout (it acts, then answers late).
// In retry mode the receiver deduplicates by Idempotency-Key, as an endpoint that honours it; in
// reconcile mode it applies every request blindly, as one without idempotency, and `outbox
// reconcile check` (a real process) settles what the relays parked in doubt by asking the
// receiver's status URL. Then: every committed event applied (lost 0), nothing applied that was
// not committed (phantom 0), nothing applied twice (duplicate effects 0: in reconcile mode the
// figure the mode exists for), each aggregate in sequence order (inversions 0), nothing left.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "fault/process.hpp"
#include "fault/scenarios.hpp"
#include "fault/steady_writer.hpp"
#include "fault/workers.hpp"
#include "outbox/producer.hpp"
#include "outbox/schema.hpp"
#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/http_receiver.hpp"
#include "outbox/transaction.hpp"
#include "pg/connection.hpp"

namespace outbox::campaign {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kAggregates = 20;
constexpr auto kRequestTimeout = 1000ms;

enum class HttpFault { relay_kill_before_mark, receiver_down, receiver_slow };
constexpr int kHttpFaultKinds = 3;

const char* name(HttpFault fault) {
  switch (fault) {
    case HttpFault::relay_kill_before_mark:
      return "relay killed between the 2xx and the mark";
    case HttpFault::receiver_down:
      return "receiver down and restarted";
    case HttpFault::receiver_slow:
      return "receiver slower than the timeout";
  }
  return "?";
}

struct HttpCampaign {
  ScenarioOptions options;
  bool reconcile = false;
  std::filesystem::path dir;
  std::string url;
  HttpReceiver& receiver;
  std::mt19937 random{20261203};
  std::array<Process, 2> relays{};
  int reconcile_runs = 0;
  int not_fired = 0;

  std::string log(const std::string& name) const { return (dir / (name + ".log")).string(); }

  Process start_relay(int index, const std::string& faults) const {
    std::map<std::string, std::string> env{{"OUTBOX_LOG_LEVEL", "debug"}};
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    return Process({options.outbox_binary,
                    "relay",
                    "--db",
                    url,
                    "--schema",
                    kSchema,
                    "--sink",
                    "http",
                    "--http-url",
                    receiver.url() + "/hooks/{aggregate_type}/{aggregate_id}",
                    "--http-on-unknown",
                    reconcile ? "reconcile" : "retry",
                    "--http-timeout",
                    "1s",
                    "--http-connect-timeout",
                    "1s",
                    "--relay-id",
                    fmt::format("r{}", index + 1),
                    "--lease-ms",
                    "5000",
                    "--backoff-base-ms",
                    "100",
                    "--backoff-max-ms",
                    "1000",
                    "--max-attempts",
                    "0"},
                   env, log(fmt::format("relay{}", index + 1)));
  }

  // `outbox reconcile check` against the receiver's status URL; true when nothing stays in doubt.
  bool reconcile_once() {
    ++reconcile_runs;
    Process check({options.outbox_binary, "reconcile", "--db", url, "--schema", kSchema, "check",
                   "--status-url", receiver.url() + "/status/{event_id}", "--actor", "campaign",
                   // More than the relays' 1 s request timeout: an answer may still be coming.
                   "--min-age", "2s"},
                  {}, log("reconcile"));
    check.wait_for_exit(30s);
    return WIFEXITED(check.status()) && WEXITSTATUS(check.status()) == 0;
  }

  void trial(HttpFault fault) {
    const int target = static_cast<int>(random() % 2);
    switch (fault) {
      case HttpFault::relay_kill_before_mark: {
        relays[target].stop(5s);
        const int nth = static_cast<int>(random() % 20) + 1;
        relays[target] =
            start_relay(target, fmt::format("relay.after_ack_before_mark=kill@{}", nth));
        if (!relays[target].wait_for_exit(8s)) ++not_fired;
        relays[target] = start_relay(target, "");
        break;
      }
      case HttpFault::receiver_down:
        receiver.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(500 + random() % 1000));
        receiver.start();
        break;
      case HttpFault::receiver_slow:
        receiver.set_delay(kRequestTimeout + 500ms);
        std::this_thread::sleep_for(std::chrono::milliseconds(1500 + random() % 1000));
        receiver.set_delay(0ms);
        break;
    }
    if (reconcile) reconcile_once();
  }

  long long scalar(const std::string& sql) const {
    auto connection = pg::Connection::open(url, "http-campaign-probe");
    return pg::exec(connection.get(), sql).int64(0, 0);
  }
  // What a row left unfinished looks like, for the log of a failed run.
  void describe_unfinished() const {
    auto connection = pg::Connection::open(url, "http-campaign-probe");
    const auto rows = pg::exec(
        connection.get(),
        fmt::format("SELECT concat_ws(' ', event_id, aggregate_id, 'seq', aggregate_sequence, "
                    "'attempts', attempt_count, 'claimed_by', claimed_by, 'available_at', "
                    "available_at, 'quarantined', quarantine_reason, 'in_doubt_at', in_doubt_at, "
                    "in_doubt_reason, 'last_error', last_error) FROM {}.outbox_events "
                    "WHERE published_at IS NULL AND skipped_at IS NULL LIMIT 5",
                    kSchema));
    for (int i = 0; i < rows.rows(); ++i) std::cout << "  unfinished: " << rows.text(i, 0) << "\n";
  }
  long long unfinished() const {
    return scalar(fmt::format(
        "SELECT count(*) FROM {}.outbox_events WHERE published_at IS NULL AND skipped_at IS NULL",
        kSchema));
  }
};

}  // namespace

int run_http_faults(const ScenarioOptions& options, bool reconcile, bool blind) {
  const std::string label = reconcile ? "http-reconcile"
                            : blind   ? "http-retry-blind"
                                      : "http-retry";
  char dir_template[] = "/tmp/outbox-http-campaign-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
  EmbeddedPostgres postgres;
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  HttpReceiver receiver(HttpReceiver::Options{.deduplicate = !reconcile && !blind});
  HttpCampaign c{options, reconcile, dir_template, url, receiver};
  for (int i = 0; i < 2; ++i) c.relays[i] = c.start_relay(i, "");
  Writer writer(url, kAggregates);

  std::vector<HttpFault> schedule;
  for (int i = 0; i < options.trials_per_fault * kHttpFaultKinds; ++i) {
    schedule.push_back(static_cast<HttpFault>(i % kHttpFaultKinds));
  }
  std::shuffle(schedule.begin(), schedule.end(), c.random);
  const auto started = Clock::now();
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    c.trial(schedule[i]);
    if (options.verbose || (i + 1) % 10 == 0) {
      std::cout << fmt::format("  {}/{} trials, {:.0f} s, last: {}", i + 1, schedule.size(),
                               std::chrono::duration<double>(Clock::now() - started).count(),
                               name(schedule[i]))
                << std::endl;
    }
  }
  writer.stop();
  // Drain: the relays publish what is left; in reconcile mode what is in doubt is settled.
  const auto drain_until = Clock::now() + 90s;
  while (c.unfinished() > 0 && Clock::now() < drain_until) {
    std::this_thread::sleep_for(500ms);
    if (reconcile) c.reconcile_once();
  }
  const long long stuck = c.unfinished();
  if (stuck > 0) c.describe_unfinished();
  for (auto& relay : c.relays) relay.stop(10s);

  const auto effects = receiver.effects_by_key();
  const auto counts = receiver.counts();
  long long lost = 0, phantom = 0;
  for (const std::string& id : writer.committed()) {
    const auto it = effects.find(id);
    if (it == effects.end() || it->second == 0) ++lost;
  }
  for (const auto& [key, applied] : effects) {
    if (applied > 0 && !writer.committed().contains(key)) ++phantom;
  }
  const long long settled = c.scalar(fmt::format(
      "SELECT count(*) FROM {}.outbox_operator_audit WHERE action LIKE 'reconcile_%'", kSchema));
  std::cout << fmt::format(
                   "{} trials={} per_fault={} not_fired={} committed={} requests={} effects={} "
                   "lost={} phantom={} duplicate_effects={} suppressed_repeats={} inversions={} "
                   "settled_in_doubt={} reconcile_runs={} stuck={} {:.0f} s",
                   label, schedule.size(), options.trials_per_fault, c.not_fired,
                   writer.committed().size(), counts.requests, counts.effects, lost, phantom,
                   counts.duplicate_effects, counts.suppressed, counts.inversions, settled,
                   c.reconcile_runs, stuck,
                   std::chrono::duration<double>(Clock::now() - started).count())
            << std::endl;
  const bool ok = lost == 0 && phantom == 0 && counts.duplicate_effects == 0 &&
                  counts.inversions == 0 && stuck == 0 && !writer.committed().empty();
  if (ok && !options.keep) std::filesystem::remove_all(c.dir);
  if (!ok) std::cout << "  logs in " << c.dir.string() << "\n";
  std::cout << label << (ok ? ": 1 passed, 0 failed" : ": 0 passed, 1 failed") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace outbox::campaign
