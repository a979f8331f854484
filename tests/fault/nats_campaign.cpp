// The NATS JetStream sink and consumer under faults (docs/GUARANTEES.md, "NATS sink"): two
// `outbox relay --sink nats` processes publish a steady stream of events to Debian's nats-server
// (started by this process), one consumer process (`outbox_campaign nats-consumer`) applies them
// through its inbox into campaign.effects, while trials in turn
//   - kill a relay between the PubAck and the mark (fault relay.after_ack_before_mark),
//   - kill nats-server (SIGKILL) and start it again on the same port and store,
//   - kill the consumer after its inbox commit, before its acks
//     (fault consumer.after_commit_before_offset).
// Then: every committed event applied (lost 0), nothing applied that was not committed (phantom
// 0), nothing applied twice (duplicate effects 0), each aggregate applied in sequence order
// (inversions 0: an effect's previous sequence is its own minus one), every event stored in the
// stream once (stream duplicates 0: Nats-Msg-Id), nothing left unpublished.

#include <fmt/format.h>
#include <nats/nats.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>

#include "fault/process.hpp"
#include "fault/scenarios.hpp"
#include "fault/steady_writer.hpp"
#include "fault/workers.hpp"
#include "outbox/schema.hpp"
#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/nats_server.hpp"
#include "pg/connection.hpp"

namespace outbox::campaign {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAggregates = 20;

enum class NatsFault { relay_kill_before_mark, server_restart, consumer_kill_after_commit };
constexpr int kNatsFaultKinds = 3;

const char* name(NatsFault fault) {
  switch (fault) {
    case NatsFault::relay_kill_before_mark:
      return "relay killed between the PubAck and the mark";
    case NatsFault::server_restart:
      return "nats-server killed and restarted";
    case NatsFault::consumer_kill_after_commit:
      return "consumer killed after its inbox commit, before its acks";
  }
  return "?";
}

struct NatsCampaign {
  ScenarioOptions options;
  std::filesystem::path dir;
  std::string url;
  NatsServer& server;
  std::mt19937 random{20261203};
  std::array<Process, 2> relays{};
  Process consumer{};
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
                    "nats",
                    "--nats-servers",
                    server.url(),
                    "--nats-stream",
                    kNatsStream,
                    "--nats-create-stream",
                    "--nats-ack-timeout",
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

  Process start_consumer(const std::string& faults) const {
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    return Process({options.self_binary, "nats-consumer", "--db", url, "--nats", server.url()}, env,
                   log("consumer"));
  }

  // Restarts `process` with a fault armed at its `nth` hit, waits for it to fire, then restarts
  // it clean.
  template <typename Start>
  void kill_by_fault(Process& process, const std::string& point, Start start) {
    process.stop(std::chrono::seconds(5));
    const int nth = static_cast<int>(random() % 5) + 1;
    process = start(fmt::format("{}=kill@{}", point, nth));
    if (!process.wait_for_exit(std::chrono::seconds(8))) ++not_fired;
    process = start("");
  }

  void trial(NatsFault fault) {
    switch (fault) {
      case NatsFault::relay_kill_before_mark: {
        const int target = static_cast<int>(random() % 2);
        kill_by_fault(relays[target], "relay.after_ack_before_mark",
                      [&](const std::string& faults) { return start_relay(target, faults); });
        break;
      }
      case NatsFault::server_restart:
        server.stop(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(300 + random() % 1000));
        server.start();
        break;
      case NatsFault::consumer_kill_after_commit:
        kill_by_fault(consumer, "consumer.after_commit_before_offset",
                      [&](const std::string& faults) { return start_consumer(faults); });
        break;
    }
  }

  long long scalar(const std::string& sql) const {
    auto connection = pg::Connection::open(url, "nats-campaign-probe");
    return pg::exec(connection.get(), sql).int64(0, 0);
  }
  long long unpublished() const {
    return scalar(fmt::format(
        "SELECT count(*) FROM {}.outbox_events WHERE published_at IS NULL AND skipped_at IS NULL",
        kSchema));
  }
  long long distinct_effects() const {
    return scalar("SELECT count(DISTINCT event_id) FROM campaign.effects");
  }
};

// Messages the stream holds (each event once when nothing was stored twice).
long long stream_messages(const std::string& server_url) {
  natsConnection* connection = nullptr;
  if (natsConnection_ConnectTo(&connection, server_url.c_str()) != NATS_OK) return -1;
  jsCtx* js = nullptr;
  jsStreamInfo* info = nullptr;
  long long messages = -1;
  if (natsConnection_JetStream(&js, connection, nullptr) == NATS_OK &&
      js_GetStreamInfo(&info, js, kNatsStream, nullptr, nullptr) == NATS_OK) {
    messages = static_cast<long long>(info->State.Msgs);
  }
  jsStreamInfo_Destroy(info);
  jsCtx_Destroy(js);
  natsConnection_Destroy(connection);
  return messages;
}

}  // namespace

int run_nats_faults(const ScenarioOptions& options) {
  char dir_template[] = "/tmp/outbox-nats-campaign-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
  EmbeddedPostgres postgres;
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  create_campaign_tables(url);
  NatsServer server;
  NatsCampaign c{options, dir_template, url, server};
  for (int i = 0; i < 2; ++i) c.relays[i] = c.start_relay(i, "");
  c.consumer = c.start_consumer("");
  Writer writer(url, kAggregates);

  std::vector<NatsFault> schedule;
  for (int i = 0; i < options.trials_per_fault * kNatsFaultKinds; ++i) {
    schedule.push_back(static_cast<NatsFault>(i % kNatsFaultKinds));
  }
  std::shuffle(schedule.begin(), schedule.end(), c.random);
  const auto started = Clock::now();
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    c.trial(schedule[i]);
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + c.random() % 500));
    if (options.verbose || (i + 1) % 10 == 0) {
      std::cout << fmt::format("  {}/{} trials, {:.0f} s, last: {}", i + 1, schedule.size(),
                               std::chrono::duration<double>(Clock::now() - started).count(),
                               name(schedule[i]))
                << std::endl;
    }
  }
  writer.stop();
  const auto committed = static_cast<long long>(writer.committed().size());
  const auto drain_until = Clock::now() + std::chrono::seconds(90);
  while ((c.unpublished() > 0 || c.distinct_effects() < committed) && Clock::now() < drain_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const long long stuck = c.unpublished();
  for (auto& relay : c.relays) relay.stop(std::chrono::seconds(10));
  c.consumer.stop(std::chrono::seconds(10));

  auto connection = pg::Connection::open(url, "nats-campaign-check");
  const auto rows = pg::exec(connection.get(),
                             "SELECT event_id::text, count(*), "
                             "count(*) FILTER (WHERE previous_sequence <> aggregate_sequence - 1) "
                             "FROM campaign.effects GROUP BY event_id");
  long long lost = 0, phantom = 0, duplicates = 0, inversions = 0;
  std::set<std::string> applied;
  for (int i = 0; i < rows.rows(); ++i) {
    const std::string id(rows.text(i, 0));
    applied.insert(id);
    if (!writer.committed().contains(id)) ++phantom;
    duplicates += rows.int64(i, 1) - 1;
    inversions += rows.int64(i, 2);
  }
  for (const std::string& id : writer.committed()) {
    if (!applied.contains(id)) ++lost;
  }
  const long long stored = stream_messages(server.url());
  const long long stream_duplicates = stored - committed;
  std::cout << fmt::format(
                   "nats trials={} per_fault={} not_fired={} committed={} stored={} applied={} "
                   "lost={} phantom={} duplicate_effects={} stream_duplicates={} inversions={} "
                   "stuck={} {:.0f} s",
                   schedule.size(), options.trials_per_fault, c.not_fired, committed, stored,
                   applied.size(), lost, phantom, duplicates, stream_duplicates, inversions, stuck,
                   std::chrono::duration<double>(Clock::now() - started).count())
            << std::endl;
  const bool ok = lost == 0 && phantom == 0 && duplicates == 0 && inversions == 0 &&
                  stream_duplicates == 0 && stuck == 0 && committed > 0;
  if (ok && !options.keep) std::filesystem::remove_all(c.dir);
  if (!ok) std::cout << "  logs in " << c.dir.string() << "\n";
  std::cout << "nats" << (ok ? ": 1 passed, 0 failed" : ": 0 passed, 1 failed") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace outbox::campaign
