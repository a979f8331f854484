// The broker sinks and their consumers under faults (docs/GUARANTEES.md, "NATS sink", "RabbitMQ
// sink"): two `outbox relay --sink NAME` processes publish a steady stream of events to a broker
// started by this process (Debian's nats-server or rabbitmq-server), one consumer process
// (`outbox_campaign nats-consumer` or `rabbitmq-consumer`) applies them through its inbox into
// campaign.effects, while trials in turn
//   - kill a relay between the broker's acknowledgement and the mark (relay.after_ack_before_mark),
//   - kill the broker (SIGKILL) and start it again on the same port and data,
//   - kill the consumer after its inbox commit, before its acks
//     (fault consumer.after_commit_before_offset).
// Then: every committed event applied (lost 0), nothing applied that was not committed (phantom
// 0), nothing applied twice (duplicate effects 0), each aggregate applied in sequence order
// (inversions 0: an effect's previous sequence is its own minus one), nothing left unpublished;
// for NATS and Redis also every event stored once (stream duplicates 0: Nats-Msg-Id, the Redis
// sink's dedup script).
// RabbitMQ deduplicates nothing: copies in its queue are the inbox's to absorb.

#include <fmt/format.h>
#include <nats/nats.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "fault/process.hpp"
#include "fault/scenarios.hpp"
#include "fault/steady_writer.hpp"
#include "fault/workers.hpp"
#include "outbox/redis_consumer.hpp"
#include "outbox/schema.hpp"
#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/nats_server.hpp"
#include "outbox/testing/rabbitmq_server.hpp"
#include "outbox/testing/redis_server.hpp"
#include "pg/connection.hpp"
#include "redis/redis_common.hpp"

namespace outbox::campaign {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAggregates = 20;

enum class BrokerFault { relay_kill_before_mark, server_restart, consumer_kill_after_commit };
constexpr int kBrokerFaultKinds = 3;

// What differs from one broker to the next.
struct BrokerUnderTest {
  std::string name;                           // "nats": the report's and the worker's prefix
  std::string ack;                            // what the broker's acknowledgement is called
  std::vector<std::string> sink_flags;        // `outbox relay --sink ...` and its flags
  std::vector<std::string> consumer_command;  // the worker and its broker flags (after --db)
  std::function<void(bool kill)> stop;
  std::function<void()> start;
  // Messages the broker holds less the events committed, which must be 0 (none: not counted,
  // for a broker that deduplicates nothing by design).
  std::function<std::optional<long long>(long long committed)> stored_duplicates;
};

std::string name(BrokerFault fault, const BrokerUnderTest& broker) {
  switch (fault) {
    case BrokerFault::relay_kill_before_mark:
      return "relay killed between the " + broker.ack + " and the mark";
    case BrokerFault::server_restart:
      return broker.name + " server killed and restarted";
    case BrokerFault::consumer_kill_after_commit:
      return "consumer killed after its inbox commit, before its acks";
  }
  return "?";
}

struct BrokerCampaign {
  ScenarioOptions options;
  std::filesystem::path dir;
  std::string url;
  const BrokerUnderTest& broker;
  std::mt19937 random{20261203};
  std::array<Process, 2> relays{};
  Process consumer{};
  int not_fired = 0;

  std::string log(const std::string& name) const { return (dir / (name + ".log")).string(); }

  Process start_relay(int index, const std::string& faults) const {
    std::map<std::string, std::string> env{{"OUTBOX_LOG_LEVEL", "debug"}};
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    std::vector<std::string> args{options.outbox_binary, "relay", "--db", url, "--schema", kSchema};
    args.insert(args.end(), broker.sink_flags.begin(), broker.sink_flags.end());
    for (const std::string& arg :
         {std::string("--relay-id"), fmt::format("r{}", index + 1), std::string("--lease-ms"),
          std::string("5000"), std::string("--backoff-base-ms"), std::string("100"),
          std::string("--backoff-max-ms"), std::string("1000"), std::string("--max-attempts"),
          std::string("0")}) {
      args.push_back(arg);
    }
    return Process(args, env, log(fmt::format("relay{}", index + 1)));
  }

  Process start_consumer(const std::string& faults) const {
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    std::vector<std::string> args{options.self_binary, broker.consumer_command.front(), "--db",
                                  url};
    args.insert(args.end(), broker.consumer_command.begin() + 1, broker.consumer_command.end());
    return Process(args, env, log("consumer"));
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

  void trial(BrokerFault fault) {
    switch (fault) {
      case BrokerFault::relay_kill_before_mark: {
        const int target = static_cast<int>(random() % 2);
        kill_by_fault(relays[target], "relay.after_ack_before_mark",
                      [&](const std::string& faults) { return start_relay(target, faults); });
        break;
      }
      case BrokerFault::server_restart:
        broker.stop(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(300 + random() % 1000));
        broker.start();
        break;
      case BrokerFault::consumer_kill_after_commit:
        kill_by_fault(consumer, "consumer.after_commit_before_offset",
                      [&](const std::string& faults) { return start_consumer(faults); });
        break;
    }
  }

  long long scalar(const std::string& sql) const {
    auto connection = pg::Connection::open(url, "broker-campaign-probe");
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

int run_broker_faults(const ScenarioOptions& options, const std::string& url,
                      const BrokerUnderTest& broker) {
  std::string dir_template =
      (std::filesystem::temp_directory_path() / ("outbox-" + broker.name + "-campaign-XXXXXX"))
          .string();
  if (::mkdtemp(dir_template.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  BrokerCampaign c{options, dir_template, url, broker};
  for (int i = 0; i < 2; ++i) c.relays[i] = c.start_relay(i, "");
  c.consumer = c.start_consumer("");
  Writer writer(url, kAggregates);

  std::vector<BrokerFault> schedule;
  for (int i = 0; i < options.trials_per_fault * kBrokerFaultKinds; ++i) {
    schedule.push_back(static_cast<BrokerFault>(i % kBrokerFaultKinds));
  }
  std::shuffle(schedule.begin(), schedule.end(), c.random);
  const auto started = Clock::now();
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    c.trial(schedule[i]);
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + c.random() % 500));
    if (options.verbose || (i + 1) % 10 == 0) {
      std::cout << fmt::format("  {}/{} trials, {:.0f} s, last: {}", i + 1, schedule.size(),
                               std::chrono::duration<double>(Clock::now() - started).count(),
                               name(schedule[i], broker))
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

  auto connection = pg::Connection::open(url, "broker-campaign-check");
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
  const std::optional<long long> stored_duplicates = broker.stored_duplicates(committed);
  std::cout << fmt::format(
                   "{} trials={} per_fault={} not_fired={} committed={} applied={} lost={} "
                   "phantom={} duplicate_effects={} stored_duplicates={} inversions={} stuck={} "
                   "{:.0f} s",
                   broker.name, schedule.size(), options.trials_per_fault, c.not_fired, committed,
                   applied.size(), lost, phantom, duplicates,
                   stored_duplicates ? std::to_string(*stored_duplicates) : std::string("n/a"),
                   inversions, stuck, std::chrono::duration<double>(Clock::now() - started).count())
            << std::endl;
  const bool ok = lost == 0 && phantom == 0 && duplicates == 0 && inversions == 0 &&
                  stored_duplicates.value_or(0) == 0 && stuck == 0 && committed > 0;
  if (ok && !options.keep) std::filesystem::remove_all(c.dir);
  if (!ok) std::cout << "  logs in " << c.dir.string() << "\n";
  std::cout << broker.name << (ok ? ": 1 passed, 0 failed" : ": 0 passed, 1 failed") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace

int run_nats_faults(const ScenarioOptions& options) {
  EmbeddedPostgres postgres;
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  create_campaign_tables(url);
  NatsServer server;
  const BrokerUnderTest nats{"nats",
                             "PubAck",
                             {"--sink", "nats", "--nats-servers", server.url(), "--nats-stream",
                              kNatsStream, "--nats-create-stream", "--nats-ack-timeout", "1s"},
                             {"nats-consumer", "--nats", server.url()},
                             [&](bool kill) { server.stop(kill); },
                             [&] { server.start(); },
                             [&](long long committed) -> std::optional<long long> {
                               return stream_messages(server.url()) - committed;
                             }};
  return run_broker_faults(options, url, nats);
}

int run_rabbitmq_faults(const ScenarioOptions& options) {
  EmbeddedPostgres postgres;
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  create_campaign_tables(url);
  RabbitMqServer server;
  // The topology first, settled: a node killed within about 2 s of a declaration can lose it
  // (Mnesia's log writes are delayed), and a quorum queue whose record went while its Raft log
  // stayed gets no leader when the node comes back: nothing is ever delivered from it again.
  // Production declares its topology long before a crash; so does the campaign.
  server.declare_queue(kRabbitMqExchange, "campaign", "#");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const BrokerUnderTest rabbitmq{
      "rabbitmq",
      "confirm",
      {"--sink", "rabbitmq", "--rabbitmq-url", server.url(), "--rabbitmq-exchange",
       kRabbitMqExchange, "--rabbitmq-declare-exchange", "--rabbitmq-confirm-timeout", "2s"},
      {"rabbitmq-consumer", "--rabbitmq", server.url()},
      [&](bool kill) { server.stop(kill); },
      [&] { server.start(); },
      [](long long) -> std::optional<long long> { return std::nullopt; }};
  return run_broker_faults(options, url, rabbitmq);
}

int run_redis_faults(const ScenarioOptions& options) {
  EmbeddedPostgres postgres;
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  create_campaign_tables(url);
  RedisServer server;
  const auto stored = [&server]() -> long long {
    redis::Connection connection(redis::parse_url(server.url()), std::chrono::seconds(5));
    long long entries = 0;
    for (const auto& stream : redis_streams(kRedisStreamTemplate, "account", kRedisPartitions)) {
      entries += connection.command({"XLEN", stream})->integer;
    }
    return entries;
  };
  const BrokerUnderTest redis{
      "redis",
      "reply",
      {"--sink", "redis", "--redis-url", server.url(), "--redis-stream-template",
       kRedisStreamTemplate, "--redis-partitions", std::to_string(kRedisPartitions),
       "--redis-reply-timeout", "1s"},
      {"redis-consumer", "--redis", server.url()},
      [&](bool kill) { server.stop(kill); },
      [&] { server.start(); },
      [&](long long committed) -> std::optional<long long> { return stored() - committed; }};
  return run_broker_faults(options, url, redis);
}

}  // namespace outbox::campaign
