// `outbox consume`: an inbox consumer without C++. It reads a topic (Kafka, NATS JetStream,
// RabbitMQ, Redis Streams) and applies each event in the inbox transaction by running the
// statement --apply names with the event as jsonb (outbox/sql_effect.hpp), gap-aware by default
// (docs/CONSUMING.md). Stops in order on SIGTERM, SIGINT or SIGHUP.

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "observe_flags.hpp"
#include "outbox/connection.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/kafka_consumer.hpp"
#include "outbox/log.hpp"
#include "outbox/nats_consumer.hpp"
#include "outbox/observe.hpp"
#include "outbox/rabbitmq_consumer.hpp"
#include "outbox/redis_consumer.hpp"
#include "outbox/sql_effect.hpp"
#include "outbox/upcaster.hpp"

namespace outbox::cli {
namespace {

struct ConsumeFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string consumer;
  std::string apply;
  std::string from = "kafka";
  // Kafka
  KafkaFlags kafka;
  std::vector<std::string> topics;
  std::string group;
  std::string on_offset_gap = "stop";
  // NATS
  std::string nats_url = NatsConsumerOptions{}.servers;
  std::string nats_stream = NatsConsumerOptions{}.stream;
  std::string nats_durable;
  std::string nats_filter = NatsConsumerOptions{}.filter_subject;
  std::string nats_creds;
  std::string nats_ca;
  // RabbitMQ
  std::string rabbitmq_url = RabbitMqConsumerOptions{}.url;
  std::string rabbitmq_queue;
  std::string rabbitmq_exchange = RabbitMqConsumerOptions{}.exchange;
  std::string rabbitmq_queue_type = RabbitMqConsumerOptions{}.queue_type;
  // Redis
  std::string redis_url = RedisConsumerOptions{}.url;
  std::vector<std::string> redis_aggregate_types;
  std::string redis_stream_template = "outbox:{aggregate_type}:{partition}";
  std::uint32_t redis_partitions = 16;
  std::string redis_group;
  // The inbox
  bool no_ordering = false;
  std::string park_after = duration_text(InboxOrdering{}.park_after);
  int park_failing_after = InboxOrdering{}.park_failing_after;
  bool start_at_first_seen = false;
  int batch = 100;
  std::string retry_backoff_max = "30s";
  std::vector<std::string> upcasts;           // TYPE:FROM=FUNCTION
  std::vector<std::string> current_versions;  // TYPE=VERSION
  ObserveFlags observe;
};

// A positive decimal version, or ConfigError naming the flag and the item.
std::int32_t version_of(const std::string& text, const char* flag, const std::string& item) {
  std::size_t used = 0;
  int version = 0;
  try {
    version = std::stoi(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || version < 1) {
    throw ConfigError(fmt::format("{} {}: the version must be a whole number from 1", flag, item));
  }
  return version;
}

// --upcast TYPE:FROM=FUNCTION and --current-version TYPE=VERSION as the consumer's Upcasters.
Upcasters upcasters_of(const ConsumeFlags& flags) {
  Upcasters upcasters;
  for (const std::string& item : flags.upcasts) {
    const std::size_t equals = item.find('=');
    const std::size_t colon = item.rfind(':', equals);
    if (equals == std::string::npos || colon == std::string::npos || colon == 0) {
      throw ConfigError("--upcast " + item +
                        ": expected EVENT_TYPE:FROM_VERSION=FUNCTION, e.g. "
                        "OrderPlaced:1=app.order_placed_v1_to_v2");
    }
    upcasters.add_sql(item.substr(0, colon),
                      version_of(item.substr(colon + 1, equals - colon - 1), "--upcast", item),
                      item.substr(equals + 1));
  }
  for (const std::string& item : flags.current_versions) {
    const std::size_t equals = item.rfind('=');
    if (equals == std::string::npos || equals == 0) {
      throw ConfigError("--current-version " + item + ": expected EVENT_TYPE=VERSION");
    }
    upcasters.current(item.substr(0, equals),
                      version_of(item.substr(equals + 1), "--current-version", item));
  }
  return upcasters;
}

InboxOrdering ordering_of(const ConsumeFlags& flags) {
  InboxOrdering ordering;
  ordering.enabled = !flags.no_ordering;
  ordering.park_after = parse_duration(flags.park_after);
  ordering.park_failing_after = flags.park_failing_after;
  ordering.start_at_first_seen = flags.start_at_first_seen;
  return ordering;
}

// The options every broker's consumer shares, set from the flags.
template <typename Options>
Options common_options(const ConsumeFlags& flags) {
  Options options;
  options.database_url = database_url(flags.db);
  options.schema = SchemaName(flags.schema);
  options.consumer_name = flags.consumer;
  options.ordering = ordering_of(flags);
  options.upcasters = upcasters_of(flags);
  options.retry_backoff_max = parse_duration(flags.retry_backoff_max);
  return options;
}

// Runs `consumer` until a termination signal, serving its metrics when asked, then prints what it
// did. Health, retries and backoff are the consumer's run().
template <typename Consumer>
int run_until_signal(const ConsumeFlags& flags, Consumer& consumer) {
  const SignalWatch watch = on_termination_signal([&consumer] { consumer.request_stop(); });
  std::unique_ptr<ObserveServer> server;
  if (!flags.observe.listen.empty()) {
    ObserveOptions observe = observe_options(flags.observe, flags.db, flags.schema);
    observe.backlog = false;  // a consumer's database need not hold the producer's outbox
    server = std::make_unique<ObserveServer>(std::move(observe));
    server->watch_consumer(flags.consumer, consumer);
    server->start();
  }
  consumer.run();
  if (server) server->stop();
  const auto s = consumer.stats();
  std::cout << fmt::format(
      "consumer {}: applied {}, duplicates {}, held {}, parked {} (now waiting {}, parked {})\n",
      flags.consumer, s.applied, s.duplicates, s.held, s.effects_parked, s.events_waiting,
      s.events_parked);
  return 0;
}

int run_consume(const ConsumeFlags& flags) {
  const SqlEffect effect(flags.apply);
  {
    auto connection = open_cli_connection(flags.db, "outbox-consume");
    effect.check(connection.get());
  }
  if (flags.from == "kafka") {
    auto options = common_options<KafkaConsumerOptions>(flags);
    options.brokers = flags.kafka.brokers;
    options.group_id = flags.group.empty() ? flags.consumer : flags.group;
    options.topics = flags.topics;
    options.properties = flags.kafka.merged_properties();
    options.on_offset_gap =
        flags.on_offset_gap == "skip" ? OffsetGapPolicy::skip : OffsetGapPolicy::stop;
    KafkaInboxConsumer consumer(options, effect);
    return run_until_signal(flags, consumer);
  }
  if (flags.from == "nats") {
    auto options = common_options<NatsConsumerOptions>(flags);
    options.servers = flags.nats_url;
    options.stream = flags.nats_stream;
    options.durable = flags.nats_durable.empty() ? flags.consumer : flags.nats_durable;
    options.filter_subject = flags.nats_filter;
    options.credentials_file = flags.nats_creds;
    options.ca_file = flags.nats_ca;
    options.batch = flags.batch;
    NatsInboxConsumer consumer(options, effect);
    return run_until_signal(flags, consumer);
  }
  if (flags.from == "rabbitmq") {
    auto options = common_options<RabbitMqConsumerOptions>(flags);
    options.url = flags.rabbitmq_url;
    options.queue = flags.rabbitmq_queue.empty() ? flags.consumer : flags.rabbitmq_queue;
    options.exchange = flags.rabbitmq_exchange;
    options.queue_type = flags.rabbitmq_queue_type;
    options.batch = flags.batch;
    RabbitMqInboxConsumer consumer(options, effect);
    return run_until_signal(flags, consumer);
  }
  auto options = common_options<RedisConsumerOptions>(flags);
  options.url = flags.redis_url;
  if (flags.redis_aggregate_types.empty()) {
    throw ConfigError(
        "--from redis needs --redis-aggregate-type (repeatable): the streams are named by "
        "aggregate type and partition (--redis-stream-template, --redis-partitions)");
  }
  for (const std::string& type : flags.redis_aggregate_types) {
    for (std::string& stream :
         redis_streams(flags.redis_stream_template, type, flags.redis_partitions)) {
      options.streams.push_back(std::move(stream));
    }
  }
  options.group = flags.redis_group.empty() ? flags.consumer : flags.redis_group;
  options.batch = flags.batch;
  RedisInboxConsumer consumer(options, effect);
  return run_until_signal(flags, consumer);
}

void add_broker_flags(CLI::App* consume, ConsumeFlags& flags) {
  Commands::add_kafka_options(consume, flags.kafka);
  consume->add_option("--topic", flags.topics, "Kafka: topic to read (repeatable; ^regex)");
  consume->add_option("--group", flags.group, "Kafka: consumer group (default: --consumer)");
  consume
      ->add_option("--on-offset-gap", flags.on_offset_gap,
                   "Kafka: a partition whose next message is gone: stop it, or skip the gap")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  consume->add_option("--nats-url", flags.nats_url, "NATS: servers")->capture_default_str();
  consume->add_option("--nats-stream", flags.nats_stream, "NATS: the JetStream stream")
      ->capture_default_str();
  consume->add_option("--nats-durable", flags.nats_durable,
                      "NATS: the durable consumer (default: --consumer)");
  consume->add_option("--nats-filter-subject", flags.nats_filter, "NATS: what of the stream")
      ->capture_default_str();
  consume->add_option("--nats-creds", flags.nats_creds, "NATS: credentials file");
  consume->add_option("--nats-ca", flags.nats_ca, "NATS: CA file for TLS");
  consume->add_option("--rabbitmq-url", flags.rabbitmq_url, "RabbitMQ: amqp:// URL")
      ->capture_default_str();
  consume->add_option("--rabbitmq-queue", flags.rabbitmq_queue,
                      "RabbitMQ: queue, declared durable (default: --consumer)");
  consume
      ->add_option("--rabbitmq-exchange", flags.rabbitmq_exchange,
                   "RabbitMQ: the sink's exchange the queue is bound to")
      ->capture_default_str();
  consume->add_option("--rabbitmq-queue-type", flags.rabbitmq_queue_type, "RabbitMQ: queue type")
      ->check(CLI::IsMember({"quorum", "classic"}))
      ->capture_default_str();
  consume->add_option("--redis-url", flags.redis_url, "Redis: redis:// URL")->capture_default_str();
  consume->add_option("--redis-aggregate-type", flags.redis_aggregate_types,
                      "Redis: read this aggregate type's streams (repeatable)");
  consume
      ->add_option("--redis-stream-template", flags.redis_stream_template,
                   "Redis: stream names, as the sink's")
      ->capture_default_str();
  consume
      ->add_option("--redis-partitions", flags.redis_partitions,
                   "Redis: streams per aggregate type, as the sink's")
      ->check(CLI::Range(1U, 1024U))
      ->capture_default_str();
  consume->add_option("--redis-group", flags.redis_group,
                      "Redis: consumer group (default: --consumer)");
}

}  // namespace

void register_consume(Commands& commands) {
  const auto [consume, flags] = commands.add(
      "consume",
      "apply events from a broker through the inbox by running your SQL (--apply), in order",
      run_consume);
  Commands::add_database_options(consume, flags->db, flags->schema);
  consume
      ->add_option("--consumer", flags->consumer,
                   "the inbox's consumer name: what it applied is recorded under it")
      ->required();
  consume
      ->add_option("--apply", flags->apply,
                   "the statement that applies one event, run in the inbox transaction with the "
                   "event as jsonb in $1, e.g. \"SELECT app.apply_order_event($1)\"")
      ->required();
  consume->add_option("--from", flags->from, "the broker")
      ->check(CLI::IsMember({"kafka", "nats", "rabbitmq", "redis"}))
      ->capture_default_str();
  add_broker_flags(consume, *flags);
  consume->add_flag("--no-ordering", flags->no_ordering,
                    "deduplicate by event id only: apply in the order messages arrive");
  consume
      ->add_option("--park-after", flags->park_after,
                   "a held event waiting this long for its predecessor is reported parked")
      ->capture_default_str();
  consume
      ->add_option("--park-failing-after", flags->park_failing_after,
                   "park an event whose SQL failed this many times in a row (0: never)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  consume->add_flag("--start-at-first-seen", flags->start_at_first_seen,
                    "an aggregate never applied starts at the first sequence seen, not at 1");
  consume->add_option("--batch", flags->batch, "NATS, RabbitMQ, Redis: messages per transaction")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  consume->add_option("--upcast", flags->upcasts,
                      "EVENT_TYPE:FROM=FUNCTION: a SQL function that takes a payload of version "
                      "FROM as jsonb and returns it as FROM+1's, applied before --apply "
                      "(repeatable; docs/CONSUMING.md)");
  consume->add_option("--current-version", flags->current_versions,
                      "EVENT_TYPE=VERSION: the version --apply is written for, when no --upcast "
                      "reaches it; a newer event is parked, not applied (repeatable)");
  consume
      ->add_option("--retry-backoff-max", flags->retry_backoff_max,
                   "longest wait between retries of a failing batch")
      ->capture_default_str();
  add_observe_options(consume, flags->observe, "--metrics-listen",
                      "serve /metrics, /healthz and /readyz on host:port (docs/OPERATIONS.md)");
  commands.add_password_file_option(consume);
}

}  // namespace outbox::cli
