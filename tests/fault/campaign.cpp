// The crash campaign: real processes (two producers, two relays, one consumer) on the embedded
// PostgreSQL and the Kafka mock cluster (both hosted by this long-lived process), faults injected
// at every boundary of ../shared/FAULTS.md from a seed, then the recorded history checked.
//
//   outbox_campaign run --outbox build/outbox [--seed S] [--trials N] [--keep]
//
// Prints the FAULTS.md report line; exits 1 on any violation. The same seed replays the same
// schedule of faults (process timing still varies).

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/fault.hpp"
#include "fault/history.hpp"
#include "fault/process.hpp"
#include "fault/scenarios.hpp"
#include "fault/workers.hpp"
#include "outbox/schema.hpp"
#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/kafka_mock.hpp"
#include "pg/connection.hpp"

namespace outbox::campaign {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

enum class Fault {
  relay_kill_after_claim,
  relay_kill_before_publish,
  relay_kill_after_ack_before_mark,
  relay_kill_after_mark,
  relay_sigkill_anytime,
  relay_paused_past_lease,
  consumer_kill_after_commit_before_offset,
  producer_kill_before_commit,
  producer_kill_after_commit,
  broker_request_errors,
  broker_down,
  postgres_immediate_stop,
  cleanup_kill_mid_batch,
};
constexpr int kFaultKinds = 13;

const char* name(Fault fault) {
  switch (fault) {
    case Fault::relay_kill_after_claim:
      return "relay.after_claim kill";
    case Fault::relay_kill_before_publish:
      return "relay.before_publish kill";
    case Fault::relay_kill_after_ack_before_mark:
      return "relay.after_ack_before_mark kill";
    case Fault::relay_kill_after_mark:
      return "relay.after_mark kill";
    case Fault::relay_sigkill_anytime:
      return "relay SIGKILL";
    case Fault::relay_paused_past_lease:
      return "relay SIGSTOP past lease";
    case Fault::consumer_kill_after_commit_before_offset:
      return "consumer.after_commit_before_offset kill";
    case Fault::producer_kill_before_commit:
      return "producer.before_commit kill";
    case Fault::producer_kill_after_commit:
      return "producer.after_commit kill";
    case Fault::broker_request_errors:
      return "broker request errors";
    case Fault::broker_down:
      return "broker down";
    case Fault::postgres_immediate_stop:
      return "postgres immediate stop";
    case Fault::cleanup_kill_mid_batch:
      return "cleanup.mid_batch kill";
  }
  return "?";
}

constexpr auto kLease = 2000ms;
// Short, so the cleanup deletes rows relays and the consumer have only just finished with.
constexpr auto kCleanupRetention = 1000ms;

struct Campaign {
  std::string outbox_binary;
  std::string self_binary;
  std::filesystem::path dir;
  std::mt19937 random;
  EmbeddedPostgres& postgres;
  KafkaMockCluster& kafka;
  std::string url;
  Process relays[2];
  Process producers[2];
  Process consumer;
  int relay_starts = 0;
  int producer_starts = 0;

  std::string log(const std::string& name) const { return (dir / (name + ".log")).string(); }

  Process start_relay(int index, const std::string& faults) {
    std::map<std::string, std::string> env{
        {"OUTBOX_LOG_LEVEL", "debug"}};  // every ack, for post-mortems
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    ++relay_starts;
    return Process({outbox_binary, "relay", "--db", url, "--schema", kSchema, "--kafka-brokers",
                    kafka.bootstrap_servers(), "--relay-id", fmt::format("r{}", index + 1),
                    "--lease-ms", std::to_string(kLease.count()), "--batch-size", "100",
                    // The campaign's clock runs fast: short backoff, and transient faults must
                    // never exhaust an event's attempts (that is a quarantine, tested elsewhere).
                    "--backoff-base-ms", "100", "--backoff-max-ms", "2000", "--max-attempts", "0",
                    "--kafka-property", "message.timeout.ms=1500"},
                   env, log(fmt::format("relay{}", index + 1)));
  }
  Process start_producer(int index, const std::string& faults) {
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    return Process({self_binary, "producer", "--db", url, "--log",
                    log(fmt::format("producer{}.transactions", index + 1)), "--seed",
                    std::to_string(random() % 100000 + 1 + 100000 * ++producer_starts)},
                   env, log(fmt::format("producer{}", index + 1)));
  }
  Process start_consumer(const std::string& faults) {
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    return Process({self_binary, "consumer", "--db", url, "--brokers", kafka.bootstrap_servers()},
                   env, log("consumer"));
  }

  Process start_cleanup(const std::string& faults) {
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    return Process({outbox_binary, "cleanup", "--db", url, "--schema", kSchema, "--retention",
                    fmt::format("{}ms", kCleanupRetention.count()), "--allow-short-retention",
                    "--batch-size", "20"},
                   env, log("cleanup"));
  }

  // Replaces a running process by one armed with `spec`, waits for the fault to fire (the
  // process dies), then starts a clean one. Returns false when the point was not reached.
  template <typename Start>
  bool crash_at(Process& slot, const std::string& spec, Start start) {
    slot.stop(0ms);
    slot = start(spec);
    const bool fired = slot.wait_for_exit(20s);
    slot.stop(0ms);
    slot = start("");
    return fired;
  }

  long long applied() {
    auto connection = pg::Connection::open(url, "campaign-probe");
    return pg::exec(connection.get(),
                    "SELECT coalesce(max(applied_order), 0) FROM campaign.effects")
        .int64(0, 0);
  }

  // Time until the consumer applies something new after a fault was healed.
  double recovery_ms(Clock::time_point healed, long long before) {
    while (Clock::now() - healed < 60s) {
      try {
        if (applied() > before) break;
      } catch (const std::exception&) {
        // PostgreSQL may still be recovering
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::chrono::duration<double, std::milli>(Clock::now() - healed).count();
  }

  void trial(Fault fault, std::vector<double>& recoveries, int& not_fired) {
    long long before = 0;
    try {
      before = applied();
    } catch (const std::exception&) {
    }
    const int target = static_cast<int>(random() % 2);
    const int nth = 1 + static_cast<int>(random() % 4);
    // The other relay is killed too: with head-of-line blocking one busy relay can take every
    // claimable head, and the armed one would wait long for its point. (One more crash to
    // survive; its leases expire and the armed relay takes them over.)
    auto relay_at = [&](const char* point) {
      const int other = 1 - target;
      relays[other].stop(0ms);
      const bool fired =
          crash_at(relays[target], fmt::format("{}=kill@{}", point, nth),
                   [&](const std::string& spec) { return start_relay(target, spec); });
      relays[other] = start_relay(other, "");
      return fired;
    };
    auto producer_at = [&](const char* point) {
      return crash_at(producers[target], fmt::format("{}=kill@{}", point, nth),
                      [&](const std::string& spec) { return start_producer(target, spec); });
    };
    bool fired = true;
    switch (fault) {
      case Fault::relay_kill_after_claim:
        fired = relay_at("relay.after_claim");
        break;
      case Fault::relay_kill_before_publish:
        fired = relay_at("relay.before_publish");
        break;
      case Fault::relay_kill_after_ack_before_mark:
        fired = relay_at("relay.after_ack_before_mark");
        break;
      case Fault::relay_kill_after_mark:
        fired = relay_at("relay.after_mark");
        break;
      case Fault::relay_sigkill_anytime:
        std::this_thread::sleep_for(std::chrono::milliseconds(random() % 300));
        relays[target].stop(0ms);
        relays[target] = start_relay(target, "");
        break;
      case Fault::relay_paused_past_lease:
        relays[target].signal(SIGSTOP);
        std::this_thread::sleep_for(kLease + 500ms + std::chrono::milliseconds(random() % 1000));
        relays[target].signal(SIGCONT);
        break;
      case Fault::consumer_kill_after_commit_before_offset:
        fired = crash_at(consumer, fmt::format("consumer.after_commit_before_offset=kill@{}", nth),
                         [&](const std::string& spec) { return start_consumer(spec); });
        break;
      case Fault::producer_kill_before_commit:
        fired = producer_at("producer.before_commit");
        break;
      case Fault::producer_kill_after_commit:
        fired = producer_at("producer.after_commit");
        break;
      case Fault::broker_request_errors: {
        static constexpr int kRetriable[] = {7 /*REQUEST_TIMED_OUT*/, 6 /*NOT_LEADER*/,
                                             19 /*NOT_ENOUGH_REPLICAS*/,
                                             14 /*COORDINATOR_LOADING*/};
        kafka.fail_next_produce_requests(1 + static_cast<int>(random() % 20),
                                         kRetriable[random() % 4]);
        std::this_thread::sleep_for(300ms);
        break;
      }
      case Fault::broker_down: {
        // "Down" as a client sees a dead or partitioned broker: nothing answers for a while.
        // (librdkafka 2.0's mock can abort when a broker's listener is re-created on set_up, so
        // the campaign stalls brokers instead of closing them; RelayTest closes them once.)
        const bool all = random() % 3 == 0;
        const int broker = 1 + static_cast<int>(random() % 3);
        for (int b = 1; b <= 3; ++b) {
          if (all || b == broker) kafka.set_broker_rtt(b, 3000);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500 + random() % 1500));
        for (int b = 1; b <= 3; ++b) kafka.set_broker_rtt(b, 0);
        break;
      }
      case Fault::postgres_immediate_stop:
        std::this_thread::sleep_for(std::chrono::milliseconds(random() % 300));
        postgres.restart_immediate();
        break;
      case Fault::cleanup_kill_mid_batch: {
        // Killed between a batch's DELETE and its COMMIT, while relays and the consumer run.
        Process cleaner = start_cleanup(fmt::format("cleanup.mid_batch=kill@{}", nth));
        fired = cleaner.wait_for_exit(20s) && WIFSIGNALED(cleaner.status()) &&
                WTERMSIG(cleaner.status()) == SIGKILL;
        cleaner.stop(0ms);
        // Then a whole pass, which reaches the rows finished just before the retention.
        Process full = start_cleanup("");
        full.wait_for_exit(30s);
        break;
      }
    }
    if (!fired) ++not_fired;
    recoveries.push_back(recovery_ms(Clock::now(), before));
  }
};

// What the consumer processes' logs say about the broker: the largest lag any of them reported
// (workers.cpp writes a consumer-stats line every 5 s) and the offset gaps they met (every gap is
// logged with the policy applied, "on_offset_gap=..."): messages the broker dropped before the
// consumer applied them. A gap is a failure of the campaign's sizing, not of the relays, and the
// campaign says so instead of counting lost effects.
struct ConsumerLog {
  long long lag_max = 0;
  long long offset_gaps = 0;
  std::string first_gap;
};

ConsumerLog read_consumer_log(const std::string& path) {
  ConsumerLog out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (const auto at = line.find("consumer-stats lag="); at != std::string::npos) {
      out.lag_max = std::max(out.lag_max, std::atoll(line.c_str() + at + 19));
    }
    if (line.find("on_offset_gap=") != std::string::npos) {
      if (++out.offset_gaps == 1) out.first_gap = line;
    }
  }
  return out;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1))];
}

int run(const std::string& outbox_binary, unsigned seed, int trials, bool keep, bool verbose,
        const std::string& only) {
  char dir_template[] = "/tmp/outbox-campaign-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::filesystem::path dir(dir_template);
  std::cout << fmt::format("campaign seed={} trials={} folder={}", seed, trials, dir.string())
            << std::endl;

  EmbeddedPostgresOptions pg_options;
  pg_options.keep_data = keep;
  EmbeddedPostgres postgres(pg_options);
  KafkaMockCluster kafka(3);
  // One partition per aggregate (campaign_aggregate): each holds its aggregate's whole history
  // of a 1,040-trial run within the mock's 5 MiB.
  kafka.create_topic(kTopic, kPartitions, 3);
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  create_campaign_tables(url);

  Campaign c{outbox_binary,
             std::filesystem::canonical("/proc/self/exe").string(),
             dir,
             std::mt19937(seed),
             postgres,
             kafka,
             url,
             {},
             {},
             {},
             0,
             0};
  for (int i = 0; i < 2; ++i) c.relays[i] = c.start_relay(i, "");
  for (int i = 0; i < 2; ++i) c.producers[i] = c.start_producer(i, "");
  c.consumer = c.start_consumer("");

  // Every kind equally often, in an order the seed shuffles.
  std::vector<Fault> schedule;
  for (int i = 0; schedule.size() < static_cast<std::size_t>(trials); ++i) {
    const auto fault = static_cast<Fault>(i % kFaultKinds);
    if (only.empty() || std::string(name(fault)).find(only) != std::string::npos) {
      schedule.push_back(fault);
    }
  }
  std::shuffle(schedule.begin(), schedule.end(), c.random);
  std::vector<double> recoveries;
  int not_fired = 0;
  const auto started = Clock::now();
  for (int i = 0; i < trials; ++i) {
    const auto trial_started = Clock::now();
    c.trial(schedule[static_cast<std::size_t>(i)], recoveries, not_fired);
    if (verbose) {
      std::cout
          << fmt::format(
                 "    {:<42} {:>6.0f} ms, recovery {:>6.0f} ms",
                 name(schedule[static_cast<std::size_t>(i)]),
                 std::chrono::duration<double, std::milli>(Clock::now() - trial_started).count(),
                 recoveries.back())
          << std::endl;
    }
    if ((i + 1) % 12 == 0 || i + 1 == trials) {
      std::cout << fmt::format("  {}/{} trials, {:.0f} s, last: {}", i + 1, trials,
                               std::chrono::duration<double>(Clock::now() - started).count(),
                               name(schedule[static_cast<std::size_t>(i)]))
                << std::endl;
    }
  }

  // Quiesce: producers stop; the rest drains what was committed.
  for (auto& p : c.producers) p.stop(10s);
  const auto quiesce_started = Clock::now();
  HistoryInput input;
  input.database_url = url;
  input.brokers = kafka.bootstrap_servers();
  input.topic = kTopic;
  for (int i = 0; i < 2; ++i)
    input.transaction_logs.push_back(c.log(fmt::format("producer{}.transactions", i + 1)));
  for (int i = 0; i < 2; ++i) input.relay_logs.push_back(c.log(fmt::format("relay{}", i + 1)));
  input.cleanup_retention = kCleanupRetention;
  const HistoryReport report = check_history(input, 120s);
  if (verbose) {
    std::cout << fmt::format("  history checked in {:.1f} s (drain {:.1f} s)",
                             std::chrono::duration<double>(Clock::now() - quiesce_started).count(),
                             report.drain_seconds)
              << std::endl;
  }
  for (auto& r : c.relays) r.stop(15s);
  c.consumer.stop(10s);
  const ConsumerLog consumer_log = read_consumer_log(c.log("consumer"));

  std::cout
      << fmt::format(
             "seed={} trials={} per_fault_point={} not_fired={} ok={} fail={} unknown={} "
             "intents={} lost={} phantom={} rolled_back_intents={} duplicate_publishes={} "
             "({:.2f}%) duplicate_effects={} inversions={} unread_messages={} fenced={} stuck={} "
             "cleaned={} cleaned_early={} recovery_p50={:.0f}ms recovery_p99={:.0f}ms "
             "consumer_lag_max={} offset_gaps={}",
             seed, trials, trials / kFaultKinds, not_fired, report.ok, report.failed,
             report.unknown, report.intents, report.lost, report.phantom,
             report.rolled_back_intents, report.duplicate_publishes,
             report.intents == 0 ? 0.0
                                 : 100.0 * static_cast<double>(report.duplicate_publishes) /
                                       static_cast<double>(report.intents),
             report.duplicate_effects, report.inversions, report.unread_messages, report.fenced,
             report.stuck, report.cleaned, report.cleaned_early, percentile(recoveries, 0.5),
             percentile(recoveries, 0.99), consumer_log.lag_max, consumer_log.offset_gaps)
      << std::endl;
  for (const std::string& example : report.examples) std::cout << "  " << example << "\n";
  if (consumer_log.offset_gaps > 0) {
    std::cout << "  the broker dropped messages the consumer had not applied (the mock's 5 MiB per "
                 "partition): "
              << consumer_log.first_gap << "\n";
  }
  const bool ok = report.violations() == 0 && consumer_log.offset_gaps == 0;
  if (!keep && ok) std::filesystem::remove_all(dir);
  std::cout << (ok ? "campaign: 1 passed, 0 failed" : "campaign: 0 passed, 1 failed") << std::endl;
  if (!ok)
    std::cout << "replay with: outbox_campaign run --seed " << seed << " --trials " << trials
              << " --keep\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace outbox::campaign

int main(int argc, char** argv) {
  using namespace outbox::campaign;
  CLI::App app{"outbox crash campaign"};
  app.require_subcommand(1);
  std::string outbox_binary;
  unsigned seed = std::random_device{}() % 1000000;
  int trials = 20 * kFaultKinds;
  bool keep = false;
  auto* run_cmd = app.add_subcommand("run", "run the campaign");
  run_cmd->add_option("--outbox", outbox_binary, "the outbox CLI binary (runs the relays)")
      ->required();
  run_cmd->add_option("--seed", seed, "schedule seed (printed; replays a run)");
  run_cmd->add_option("--trials", trials, "faults to inject (spread evenly over the kinds)")
      ->check(CLI::Range(1, 1000000));
  run_cmd->add_flag("--keep", keep, "keep the folder with logs and the database");
  bool verbose = false;
  std::string only;
  run_cmd->add_option("--only", only, "inject only faults whose name contains this (debugging)");
  run_cmd->add_flag("--verbose", verbose, "one line per trial");
  WorkerOptions worker;
  auto* producer = app.add_subcommand("producer", "worker: write transactions");
  producer->add_option("--db", worker.database_url)->required();
  producer->add_option("--log", worker.log_path)->required();
  producer->add_option("--seed", worker.seed);
  auto* consumer = app.add_subcommand("consumer", "worker: apply effects");
  consumer->add_option("--db", worker.database_url)->required();
  consumer->add_option("--brokers", worker.brokers)->required();
  consumer->add_option("--topic", worker.topic);
  consumer->add_option("--metrics-listen", worker.metrics_listen);
  consumer->add_option("--on-offset-gap", worker.on_offset_gap)
      ->check(CLI::IsMember({"stop", "skip"}));
  ScenarioOptions scenario;
  auto* stalled = app.add_subcommand("stalled-relay", "drain a backlog built while no relay ran");
  stalled->add_option("--outbox", scenario.outbox_binary)->required();
  stalled->add_option("--events", scenario.events, "backlog size")->check(CLI::Range(1, 10000000));
  stalled->add_option("--aggregates", scenario.aggregates)->check(CLI::Range(1, 10000000));
  stalled->add_flag("--keep", scenario.keep);
  auto* hot =
      app.add_subcommand("hot-aggregates", "many writers, few aggregates, held transactions");
  hot->add_option("--outbox", scenario.outbox_binary)->required();
  hot->add_option("--seconds", scenario.seconds)->check(CLI::Range(1, 3600));
  hot->add_option("--writers", scenario.writers)->check(CLI::Range(1, 64));
  hot->add_flag("--keep", scenario.keep);
  auto* kill = app.add_subcommand(
      "relay-kill", "SIGKILL relays with default settings again and again; time the takeover");
  kill->add_option("--outbox", scenario.outbox_binary)->required();
  kill->add_option("--kills", scenario.kills)->check(CLI::Range(1, 10000));
  kill->add_option("--broker-rtt-ms", scenario.broker_rtt_ms, "the mock brokers' answer time")
      ->check(CLI::Range(0, 5000));
  kill->add_flag("--keep", scenario.keep);
  auto* paused = app.add_subcommand(
      "paused-across-restart",
      "a relay SIGSTOPped across a PostgreSQL crash-restart, the others killed meanwhile");
  paused->add_option("--outbox", scenario.outbox_binary)->required();
  // 3 ms, not 10: the hot aggregate's ~400 events behind the paused relay's head go one at a
  // time once the restart grace frees it (a broker round trip each); at 10 ms that alone took
  // 4-6 s of the 10 s the scenario allows after the last commit.
  int paused_broker_rtt_ms = 3;
  paused->add_option("--broker-rtt-ms", paused_broker_rtt_ms, "the mock brokers' answer time")
      ->check(CLI::Range(0, 5000));
  paused->add_flag("--keep", scenario.keep);
  auto* cdc = app.add_subcommand(
      "cdc",
      "change-data-capture relays: kill, pause, PostgreSQL restart, slot dropped, slot "
      "invalidated, in turn");
  cdc->add_option("--outbox", scenario.outbox_binary)->required();
  cdc->add_option("--trials-per-fault", scenario.trials_per_fault)->check(CLI::Range(1, 10000));
  cdc->add_option("--broker-rtt-ms", scenario.broker_rtt_ms, "the mock brokers' answer time")
      ->check(CLI::Range(0, 5000));
  cdc->add_flag("--table-less", scenario.table_less,
                "table-less producers and relays (kill, pause and PostgreSQL restart only)");
  cdc->add_option(
      "--only", scenario.only_fault,
      "one fault kind alone: kill, pause, postgres-restart, slot-drop, slot-invalidated");
  cdc->add_flag("--verbose", scenario.verbose);
  cdc->add_flag("--keep", scenario.keep);
  auto* gap = app.add_subcommand("retention-gap",
                                 "the broker drops messages a lagging consumer had not applied");
  gap->add_option("--outbox", scenario.outbox_binary)->required();
  gap->add_flag("--keep", scenario.keep);
  auto* http = app.add_subcommand(
      "http",
      "HTTP sink: relays killed between the 2xx and the mark, the receiver down, the receiver "
      "slower than the timeout");
  http->add_option("--outbox", scenario.outbox_binary)->required();
  http->add_option("--trials-per-fault", scenario.trials_per_fault)->check(CLI::Range(1, 10000));
  bool http_reconcile = false;
  http->add_flag("--reconcile", http_reconcile,
                 "a receiver without idempotency, relays in reconcile mode");
  bool http_blind = false;
  http->add_flag("--blind-receiver", http_blind,
                 "retry mode against a receiver without idempotency: shows the duplicate effects "
                 "reconcile mode prevents (fails by design)");
  http->add_flag("--verbose", scenario.verbose);
  http->add_flag("--keep", scenario.keep);
  auto* nats = app.add_subcommand(
      "nats",
      "NATS sink and consumer: relays killed between the PubAck and the mark, nats-server killed "
      "and restarted, the consumer killed after its inbox commit");
  nats->add_option("--outbox", scenario.outbox_binary)->required();
  nats->add_option("--trials-per-fault", scenario.trials_per_fault)->check(CLI::Range(1, 10000));
  nats->add_flag("--verbose", scenario.verbose);
  nats->add_flag("--keep", scenario.keep);
  auto* nats_consumer = app.add_subcommand("nats-consumer", "worker: apply the NATS stream");
  nats_consumer->add_option("--db", worker.database_url)->required();
  nats_consumer->add_option("--nats", worker.nats_url)->required();
  auto* rabbitmq = app.add_subcommand(
      "rabbitmq",
      "RabbitMQ sink and consumer: relays killed between the confirm and the mark, "
      "rabbitmq-server killed and restarted, the consumer killed after its inbox commit");
  rabbitmq->add_option("--outbox", scenario.outbox_binary)->required();
  rabbitmq->add_option("--trials-per-fault", scenario.trials_per_fault)
      ->check(CLI::Range(1, 10000));
  rabbitmq->add_flag("--verbose", scenario.verbose);
  rabbitmq->add_flag("--keep", scenario.keep);
  auto* rabbitmq_consumer =
      app.add_subcommand("rabbitmq-consumer", "worker: apply the RabbitMQ queue");
  rabbitmq_consumer->add_option("--db", worker.database_url)->required();
  rabbitmq_consumer->add_option("--rabbitmq", worker.rabbitmq_url)->required();
  auto* redis = app.add_subcommand(
      "redis",
      "Redis Streams sink and consumer: relays killed between the reply and the mark, "
      "redis-server killed and restarted, the consumer killed after its inbox commit");
  redis->add_option("--outbox", scenario.outbox_binary)->required();
  redis->add_option("--trials-per-fault", scenario.trials_per_fault)->check(CLI::Range(1, 10000));
  redis->add_flag("--verbose", scenario.verbose);
  redis->add_flag("--keep", scenario.keep);
  auto* redis_consumer = app.add_subcommand("redis-consumer", "worker: apply the Redis streams");
  redis_consumer->add_option("--db", worker.database_url)->required();
  redis_consumer->add_option("--redis", worker.redis_url)->required();
  CLI11_PARSE(app, argc, argv);
  try {
    outbox::fault::arm_from_environment();  // the workers' faults, set by the campaign
    if (*producer) return run_producer(worker);
    if (*consumer) return run_consumer(worker);
    if (*nats_consumer) return run_nats_consumer(worker);
    if (*rabbitmq_consumer) return run_rabbitmq_consumer(worker);
    if (*redis_consumer) return run_redis_consumer(worker);
    if (*stalled || *hot || *kill || *cdc || *paused || *gap || *http || *nats || *rabbitmq ||
        *redis) {
      scenario.outbox_binary = std::filesystem::absolute(scenario.outbox_binary).string();
      scenario.self_binary = std::filesystem::canonical("/proc/self/exe").string();
      if (*kill) return run_relay_kill(scenario);
      if (*paused) {
        scenario.broker_rtt_ms = paused_broker_rtt_ms;
        return run_paused_across_restart(scenario);
      }
      if (*cdc) return run_cdc_faults(scenario);
      if (*gap) return run_retention_gap(scenario);
      if (*http) return run_http_faults(scenario, http_reconcile, http_blind);
      if (*nats) return run_nats_faults(scenario);
      if (*rabbitmq) return run_rabbitmq_faults(scenario);
      if (*redis) return run_redis_faults(scenario);
      return *stalled ? run_stalled_relay(scenario) : run_hot_aggregates(scenario);
    }
    return run(std::filesystem::absolute(outbox_binary).string(), seed, trials, keep, verbose,
               only);
  } catch (const std::exception& e) {
    std::cerr << "outbox_campaign: " << e.what() << "\n";
    return 2;
  }
}
