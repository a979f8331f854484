// `outbox relay`: the polling or change-data-capture relay (with --shards, one per shard on its
// own thread), until SIGTERM/SIGINT/SIGHUP (which drain in-flight sends).
// Flags default to RelayOptions' and KafkaSinkOptions' own defaults.

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "http_flags.hpp"
#include "nats_flags.hpp"
#include "observe_flags.hpp"
#include "outbox/byte_size.hpp"
#include "outbox/discard_sink.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/http_sink.hpp"
#include "outbox/kafka_sink.hpp"
#include "outbox/log.hpp"
#include "outbox/nats_sink.hpp"
#include "outbox/observe.hpp"
#include "outbox/rabbitmq_sink.hpp"
#include "outbox/redis_sink.hpp"
#include "outbox/relay.hpp"
#include "rabbitmq_flags.hpp"
#include "redis_flags.hpp"
#include "relay_stats_format.hpp"

namespace outbox::cli {
namespace {

const RelayOptions kRelayDefaults{};

struct RelayFlags {
  std::string db;
  std::string schema = kRelayDefaults.schema.name();
  KafkaFlags kafka;
  HttpFlags http;
  NatsFlags nats;
  RabbitMqFlags rabbitmq;
  RedisFlags redis;
  std::string topic_template = KafkaSinkOptions{}.topic_template;
  std::string kafka_cloudevents_source;  // empty: no ce_ headers
  std::string relay_id;
  std::size_t batch_size = kRelayDefaults.batch_size;
  std::size_t max_in_flight = kRelayDefaults.max_in_flight;
  std::string max_in_flight_bytes = byte_size_text(kRelayDefaults.max_in_flight_bytes);
  long lease_ms = kRelayDefaults.lease.count();
  long backoff_base_ms = kRelayDefaults.backoff_base.count();
  long backoff_max_ms = kRelayDefaults.backoff_max.count();
  int max_attempts = kRelayDefaults.max_attempts;
  std::string sink = "kafka";
  std::string stats_every;  // empty: only at the end
  std::string stats_format = "text";
  bool durable_marks = kRelayDefaults.durable_marks;
  std::string source = "polling";
  std::string slot = kRelayDefaults.cdc.slot;
  std::string publication;  // empty: "<schema>_outbox"
  std::string takeover = std::to_string(kRelayDefaults.cdc.takeover.count()) + "ms";
  std::string wal_budget;  // empty: the default, or 0 with --table-less
  bool table_less = false;
  unsigned shards = 1;
  int shard = -1;  // -1: every shard, each on its own thread
  ObserveFlags observe;
};

RelayOptions relay_options(const RelayFlags& flags) {
  RelayOptions options;
  options.database_url = database_url(flags.db);
  options.schema = SchemaName(flags.schema);
  options.relay_id = flags.relay_id;
  options.batch_size = flags.batch_size;
  options.max_in_flight = flags.max_in_flight;
  options.max_in_flight_bytes = parse_byte_size(flags.max_in_flight_bytes);
  options.lease = std::chrono::milliseconds(flags.lease_ms);
  options.backoff_base = std::chrono::milliseconds(flags.backoff_base_ms);
  options.backoff_max = std::chrono::milliseconds(flags.backoff_max_ms);
  options.max_attempts = flags.max_attempts;
  options.durable_marks = flags.durable_marks;
  options.source = flags.source == "cdc" ? RelaySource::cdc : RelaySource::polling;
  options.cdc.slot = flags.slot;
  options.cdc.publication = flags.publication;
  options.cdc.takeover = parse_duration(flags.takeover);
  options.cdc.table_less = flags.table_less;
  options.cdc.wal_budget = !flags.wal_budget.empty() ? parse_byte_size(flags.wal_budget)
                           : flags.table_less        ? 0
                                                     : kRelayDefaults.cdc.wal_budget;
  options.cdc.shards = flags.shards;
  if (flags.sink == "http" && flags.http.on_unknown == "reconcile") {
    // A request still running when the drain ends leaves its row claimed, and the next relay
    // parks it in doubt: the drain outlasts the longest request.
    options.drain_timeout = std::max(options.drain_timeout,
                                     parse_duration(flags.http.timeout) + std::chrono::seconds(5));
  }
  return options;
}

// The relays this process runs: one, or with --shards N and no --shard, one per shard (relay ids
// "<id>-<shard>" when an id was given).
std::vector<RelayOptions> relays_to_run(const RelayFlags& flags) {
  const RelayOptions options = relay_options(flags);
  if (flags.shards > 1 && options.source != RelaySource::cdc) {
    throw ConfigError("relay: --shards splits change-data-capture streams; add --source cdc");
  }
  if (flags.shard >= 0) {
    if (static_cast<unsigned>(flags.shard) >= flags.shards) {
      throw ConfigError(fmt::format("relay: --shard {} with --shards {}: the shard is 0 to {}",
                                    flags.shard, flags.shards, flags.shards - 1));
    }
    RelayOptions one = options;
    one.cdc.shard = static_cast<unsigned>(flags.shard);
    if (!one.relay_id.empty()) one.relay_id += "-" + std::to_string(flags.shard);
    return {one};
  }
  std::vector<RelayOptions> all;
  for (unsigned shard = 0; shard < flags.shards; ++shard) {
    RelayOptions one = options;
    one.cdc.shard = shard;
    if (flags.shards > 1 && !one.relay_id.empty()) one.relay_id += "-" + std::to_string(shard);
    all.push_back(std::move(one));
  }
  return all;
}

KafkaSinkOptions sink_options(const RelayFlags& flags, std::chrono::milliseconds lease) {
  KafkaSinkOptions sink;
  sink.brokers = flags.kafka.brokers;
  sink.topic_template = flags.topic_template;
  sink.cloudevents_source = flags.kafka_cloudevents_source;
  sink.properties = flags.kafka.merged_properties();
  sink.max_message_timeout = lease;
  return sink;
}

std::chrono::milliseconds stats_interval(const RelayFlags& flags) {
  if (flags.stats_every.empty()) return std::chrono::milliseconds(0);
  const auto every = parse_duration(flags.stats_every);
  if (every < std::chrono::milliseconds(100)) {
    throw ConfigError("relay: --stats-every must be at least 100ms, not \"" + flags.stats_every +
                      "\"");
  }
  return every;
}

void print_stats(const RelayFlags& flags, const Relay& relay) {
  // One line per relay; several shards' relays print from one thread at a time.
  static std::mutex printing;
  const std::lock_guard lock(printing);
  const RelayStats stats = relay.stats();
  if (flags.stats_format == "json") {
    // A last error may quote bytes that are not UTF-8 (a server's message, a broker's).
    std::cout << relay_stats_json(relay.relay_id(), stats)
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else {
    std::cout << relay_stats_text(relay.relay_id(), stats) << std::endl;
  }
  // A relay is a service: a closed stdout (`| head`, a log shipper that died) ends its stats
  // lines, not its work. Said once; the stream stays failed, so later lines cost nothing.
  static bool said = false;
  if (!std::cout && !said) {
    said = true;
    write_log(LogLevel::warn,
              "stdout is closed: no more stats lines (--stats-every); the relay goes on");
  }
}

// What the signal thread, the first connection's retries and the stats reporter share.
struct RelayControl {
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;        // a signal came
  bool finished = false;        // the relays returned: the reporter stops
  std::vector<Relay*> current;  // the running relays, for the signal thread
};

using Relays = std::vector<std::unique_ptr<Relay>>;

// Builds the relays (a PostgreSQL not up yet is no error: a relay retries, Relay::run) and hands
// them to the signal handler; none when a stop came first.
Relays start_relays(const std::vector<RelayOptions>& options,
                    const std::function<std::unique_ptr<Sink>()>& make_sink,
                    RelayControl& control) {
  Relays relays;
  for (const RelayOptions& one : options) {
    relays.push_back(std::make_unique<Relay>(one, make_sink()));
  }
  std::lock_guard lock(control.mutex);
  if (control.stopping) return {};
  for (const auto& relay : relays) control.current.push_back(relay.get());
  return relays;
}

// Runs every relay to its end (one on this thread, several each on its own), with their stats
// lines every `every` (0: none) meanwhile. A relay that throws stops the others; the first
// error is rethrown once all returned.
void run_reporting(const RelayFlags& flags, const Relays& relays, RelayControl& control,
                   std::chrono::milliseconds every) {
  std::thread reporter;
  if (every.count() > 0) {
    reporter = std::thread([&] {
      std::unique_lock lock(control.mutex);
      while (!control.wake.wait_for(lock, every, [&] { return control.finished; })) {
        for (const auto& relay : relays) print_stats(flags, *relay);
      }
    });
  }
  std::mutex failing;
  std::exception_ptr first_error;
  const auto run = [&](Relay& relay) {
    try {
      relay.run();
    } catch (...) {
      {
        const std::lock_guard lock(failing);
        if (!first_error) first_error = std::current_exception();
      }
      for (const auto& other : relays) other->request_stop();
    }
  };
  if (relays.size() == 1) {
    run(*relays.front());
  } else {
    std::vector<std::thread> threads;
    for (const auto& relay : relays) threads.emplace_back([&run, &relay] { run(*relay); });
    for (std::thread& thread : threads) thread.join();
  }
  {
    std::lock_guard lock(control.mutex);
    control.finished = true;
    control.current.clear();  // the signal thread must never see a destroyed relay
  }
  control.wake.notify_all();
  if (reporter.joinable()) reporter.join();
  if (first_error) std::rethrow_exception(first_error);
}

// What makes each relay's sink, every option checked before any relay starts.
std::function<std::unique_ptr<Sink>()> sink_factory(const RelayFlags& flags,
                                                    const RelayOptions& relay) {
  if (flags.sink != "http" && any_http_flag(flags.http)) {
    throw ConfigError("relay: the --http-* flags are for --sink http");
  }
  if (flags.sink != "nats" && any_nats_flag(flags.nats)) {
    throw ConfigError("relay: the --nats-* flags are for --sink nats");
  }
  if (flags.sink != "rabbitmq" && any_rabbitmq_flag(flags.rabbitmq)) {
    throw ConfigError("relay: the --rabbitmq-* flags are for --sink rabbitmq");
  }
  if (flags.sink != "redis" && any_redis_flag(flags.redis)) {
    throw ConfigError("relay: the --redis-* flags are for --sink redis");
  }
  if (flags.sink == "discard") return [] { return make_discard_sink(); };
  if (flags.sink == "redis") {
    const RedisSinkOptions redis = redis_sink_options(flags.redis, relay.lease, relay.backoff_max);
    make_redis_sink(redis);  // refuses a bad option now, not in a relay's thread
    return [redis] { return make_redis_sink(redis); };
  }
  if (flags.sink == "rabbitmq") {
    const RabbitMqSinkOptions rabbitmq = rabbitmq_sink_options(flags.rabbitmq, relay.lease);
    make_rabbitmq_sink(rabbitmq);  // refuses a bad option now, not in a relay's thread
    return [rabbitmq] { return make_rabbitmq_sink(rabbitmq); };
  }
  if (flags.sink == "nats") {
    const NatsSinkOptions nats = nats_sink_options(flags.nats, relay.lease, relay.backoff_max);
    make_nats_sink(nats);  // refuses a bad option now, not in a relay's thread
    return [nats] { return make_nats_sink(nats); };
  }
  if (flags.sink == "http") {
    const HttpSinkOptions http = http_sink_options(flags.http, relay.lease);
    if (http.on_unknown == HttpOnUnknown::reconcile && flags.table_less) {
      throw ConfigError(
          "relay: --http-on-unknown reconcile parks an event in doubt in its row, and a "
          "table-less event has none: run the table-less relay with --http-on-unknown retry");
    }
    make_http_sink(http);  // refuses a bad option now, not in a relay's thread
    return [http] { return make_http_sink(http); };
  }
  if (flags.sink != "kafka") {
    throw ConfigError(
        "relay: --sink must be kafka, nats, rabbitmq, redis, http or discard, not \"" + flags.sink +
        "\"");
  }
  if (flags.kafka.brokers.empty()) {
    throw ConfigError("relay: --kafka-brokers host:port[,host:port] is required");
  }
  const KafkaSinkOptions kafka = sink_options(flags, relay.lease);
  return [kafka] { return make_kafka_sink(kafka); };
}

int run_relay(const RelayFlags& flags) {
  const auto every = stats_interval(flags);
  const std::vector<RelayOptions> options = relays_to_run(flags);
  const auto make_sink = sink_factory(flags, options.front());

  RelayControl control;
  const SignalWatch watch = on_termination_signal([&] {
    std::lock_guard lock(control.mutex);
    control.stopping = true;
    for (Relay* relay : control.current) relay->request_stop();
    control.wake.notify_all();
  });
  // Checked before any relay starts: a bad address or token file refuses the whole command.
  std::unique_ptr<ObserveServer> server;
  if (!flags.observe.listen.empty()) {
    server =
        std::make_unique<ObserveServer>(observe_options(flags.observe, flags.db, flags.schema));
  }
  const Relays relays = start_relays(options, make_sink, control);
  if (relays.empty()) return 0;
  // Stops the server before the relays it reads are destroyed, also when a relay throws.
  struct StopFirst {
    ObserveServer* server;
    ~StopFirst() {
      if (server != nullptr) server->stop();
    }
  } stop_first{server.get()};
  if (server) {
    for (std::size_t i = 0; i < relays.size(); ++i) {
      server->watch_relay(
          *relays[i], relays.size() == 1 ? std::string() : std::to_string(options[i].cdc.shard));
    }
    try {
      server->start();
    } catch (...) {
      // The signal thread must never see the relays this throw destroys.
      std::lock_guard lock(control.mutex);
      control.current.clear();
      throw;
    }
  }
  run_reporting(flags, relays, control, every);
  for (const auto& relay : relays) print_stats(flags, *relay);
  return 0;
}

void add_relay_tuning(CLI::App* relay, RelayFlags& flags) {
  relay->add_option("--batch-size", flags.batch_size, "rows per claim")
      ->check(CLI::Range(1, 100000));
  relay->add_option("--max-in-flight", flags.max_in_flight, "sends awaiting an ack")
      ->check(CLI::Range(1, 1000000));
  relay
      ->add_option("--max-in-flight-bytes", flags.max_in_flight_bytes,
                   "payload and header bytes the relay holds at most (claimed and awaiting an "
                   "ack; a larger row goes alone), e.g. 64MiB")
      ->capture_default_str();
  relay->add_option("--lease-ms", flags.lease_ms, "claim lease")->check(CLI::Range(100L, 3600000L));
  relay
      ->add_option("--backoff-base-ms", flags.backoff_base_ms,
                   "first retry delay after a failed send")
      ->check(CLI::Range(1L, 3600000L));
  relay->add_option("--backoff-max-ms", flags.backoff_max_ms, "longest retry delay")
      ->check(CLI::Range(1L, 86400000L));
  relay
      ->add_option("--max-attempts", flags.max_attempts,
                   "failed sends before an event is quarantined (0: never)")
      ->check(CLI::Range(0, 1000000));
}

}  // namespace

void register_relay(Commands& commands) {
  const auto [relay, flags] = commands.add(
      "relay", "publish committed events to Kafka (polling or change data capture)", run_relay);
  Commands::add_database_options(relay, flags->db, flags->schema);
  Commands::add_kafka_options(relay, flags->kafka);
  add_http_options(relay, flags->http);
  add_nats_options(relay, flags->nats);
  add_rabbitmq_options(relay, flags->rabbitmq);
  add_redis_options(relay, flags->redis);
  relay->add_option("--topic-template", flags->topic_template,
                    "topic per event; {aggregate_type} and {event_type} are replaced");
  relay->add_option("--kafka-cloudevents-source", flags->kafka_cloudevents_source,
                    "also write the CloudEvents Kafka binding's ce_ headers, with this ce_source "
                    "(e.g. /orders): about 300 bytes a message the producer's size check does "
                    "not count");
  relay->add_option("--relay-id", flags->relay_id, "name in claimed_by (default host-pid-rand)");
  add_relay_tuning(relay, *flags);
  relay
      ->add_option("--sink", flags->sink,
                   "kafka; nats (a JetStream stream, --nats-*); rabbitmq (an exchange, with "
                   "publisher confirms, --rabbitmq-*); redis (streams, --redis-*); http (one "
                   "request per event to "
                   "--http-url); or discard: acknowledge "
                   "every event at once without sending it (measures the database side alone; "
                   "nothing reaches a broker)")
      ->capture_default_str();
  relay
      ->add_option("--source", flags->source,
                   "polling (claims pending rows) or cdc (reads a logical replication slot; the "
                   "role needs REPLICATION, the server wal_level = logical)")
      ->check(CLI::IsMember({"polling", "cdc"}))
      ->capture_default_str();
  relay
      ->add_option("--slot", flags->slot,
                   "with --source cdc: the replication slot (created if missing)")
      ->capture_default_str();
  relay->add_option("--publication", flags->publication,
                    "with --source cdc: the publication (default <schema>_outbox; created if "
                    "missing)");
  relay
      ->add_option("--takeover", flags->takeover,
                   "with --source cdc: how long a stalled relay keeps the slot before a waiting "
                   "relay takes it (its walsender's wal_sender_timeout)")
      ->capture_default_str();
  relay->add_option("--wal-budget", flags->wal_budget,
                    "with --source cdc: the most WAL the slot may hold back; past it the relay "
                    "drops the slot, publishes by polling until caught up, then streams from a "
                    "new slot (0: no budget; default " +
                        byte_size_text(kRelayDefaults.cdc.wal_budget) +
                        ", and 0 with --table-less, which refuses any other)");
  relay->add_flag("--table-less", flags->table_less,
                  "with --source cdc: also publish the events of table-less producers "
                  "(ProducerOptions::table_less), which exist only in the slot's WAL: registers "
                  "the slot for them (producers refuse to write without one); no WAL budget, one "
                  "shard. A lost slot loses such events (docs/ARCHITECTURE.md)");
  relay
      ->add_option("--shards", flags->shards,
                   "with --source cdc: split the aggregates over N slots (publication row filters "
                   "on a hash of the aggregate), each streamed by its own relay; without --shard "
                   "this process runs all N")
      ->check(CLI::Range(1U, kMaxShards))
      ->capture_default_str();
  relay
      ->add_option("--shard", flags->shard,
                   "with --shards: run only this shard (0 to N-1), e.g. one per machine")
      ->check(CLI::Range(0, static_cast<int>(kMaxShards) - 1));
  relay->add_flag("--durable-marks", flags->durable_marks,
                  "commit marks synchronously: after a PostgreSQL crash no topic shows an "
                  "aggregate's k+1 before a repeat of k (docs/GUARANTEES.md)");
  relay->add_option("--stats-every", flags->stats_every,
                    "print a stats line (health, counts, last error) at this interval, e.g. 30s");
  relay
      ->add_option("--stats-format", flags->stats_format,
                   "text (one line a person reads) or json (one object per line, every counter)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_observe_options(relay, flags->observe, "--metrics-listen",
                      "serve /metrics, /healthz and /readyz on host:port, e.g. 127.0.0.1:9464 "
                      "(docs/OPERATIONS.md)");
  commands.add_password_file_option(relay);
}

}  // namespace outbox::cli
