// `outbox audit`: over a window, the outbox rows of one topic against the topic itself and a
// consumer's inbox (outbox/audit.hpp): lost, phantom, duplicated, not applied. Exit 1 when
// anything was lost or is a phantom, so a cron job or a CI step can run it.

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/audit.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/nats_audit.hpp"
#include "outbox/rabbitmq_audit.hpp"
#include "outbox/redis_audit.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

struct AuditFlags {
  std::string db;
  std::string schema = SchemaName().name();
  KafkaFlags kafka;
  std::string topic;
  std::string topic_template = AuditOptions{}.topic_template;
  std::string since;
  std::string until;
  std::string consumer;
  std::string slack = "5m";
  std::string read_timeout = "60s";
  bool json = false;
  bool from_beginning = false;
  std::string sink = "kafka";
  NatsAuditOptions nats;  // --nats-servers, --nats-stream, --nats-credentials-file, --nats-ca-file
  RabbitMqAuditOptions rabbitmq;  // --rabbitmq-url, --rabbitmq-audit-queue
  RedisAuditOptions redis;        // --redis-url, --redis-stream-template

  // What the report calls the destination: a Kafka topic, a NATS stream, a stream queue.
  [[nodiscard]] std::pair<std::string, std::string> destination() const {
    if (sink == "nats") return {"stream", nats.stream};
    if (sink == "rabbitmq") return {"stream_queue", rabbitmq.stream_queue};
    if (sink == "redis") return {"streams", redis.stream_template};
    return {"topic", topic};
  }
};

constexpr std::size_t kShown = 20;  // ids listed per finding in the text report

void print_ids(const std::string& what, const std::vector<EventId>& ids) {
  if (ids.empty()) return;
  std::cout << what << ":";
  for (std::size_t i = 0; i < ids.size() && i < kShown; ++i) std::cout << " " << ids[i].to_string();
  if (ids.size() > kShown) std::cout << " ... (" << ids.size() - kShown << " more)";
  std::cout << "\n";
}

nlohmann::json ids_json(const std::vector<EventId>& ids) {
  nlohmann::json out = nlohmann::json::array();
  for (const EventId& id : ids) out.push_back(id.to_string());
  return out;
}

// The window's settings every destination shares.
void fill_window(const AuditFlags& flags, AuditWindow& window) {
  window.database_url = database_url(flags.db);
  window.schema = SchemaName(flags.schema);
  window.since = timestamp_flag(flags.since);
  window.until = timestamp_flag(flags.until);
  if (!flags.consumer.empty()) window.consumer = flags.consumer;
  window.broker_slack = parse_duration(flags.slack);
  window.read_timeout = parse_duration(flags.read_timeout);
}

// The audit of the destination --sink names, and what the report calls it.
std::pair<AuditReport, std::string> audit_destination(const AuditFlags& flags,
                                                      AuditWindow& window) {
  if (flags.sink != "kafka" && (!flags.topic.empty() || !flags.kafka.brokers.empty())) {
    throw ConfigError(
        "audit: --topic and --kafka-brokers are for --sink kafka; a NATS stream is "
        "--nats-stream, a RabbitMQ stream queue --rabbitmq-audit-queue");
  }
  if (flags.sink == "redis") {
    RedisAuditOptions options = flags.redis;
    fill_window(flags, options);
    window = options;
    return {audit_redis_streams(options), "streams " + options.stream_template};
  }
  if (flags.sink == "rabbitmq") {
    RabbitMqAuditOptions options = flags.rabbitmq;
    fill_window(flags, options);
    window = options;
    return {audit_rabbitmq_stream(options), "stream queue " + options.stream_queue};
  }
  if (flags.sink == "nats") {
    NatsAuditOptions options = flags.nats;
    fill_window(flags, options);
    window = options;
    return {audit_nats_stream(options), "stream " + options.stream};
  }
  if (flags.topic.empty()) throw ConfigError("audit: --topic is required with --sink kafka");
  if (flags.kafka.brokers.empty())
    throw ConfigError("audit: --kafka-brokers host:port is required");
  AuditOptions options;
  fill_window(flags, options);
  options.brokers = flags.kafka.brokers;
  options.properties = flags.kafka.merged_properties();
  options.topic = flags.topic;
  options.topic_template = flags.topic_template;
  options.from_beginning = flags.from_beginning;
  window = options;
  return {audit_topic(options), flags.topic};
}

int run_audit(const AuditFlags& flags) {
  AuditWindow options;
  const auto [r, destination] = audit_destination(flags, options);
  if (options.consumer && !r.consumer_known) {
    std::cerr << "audit: warning: consumer \"" << outbox::printable(flags.consumer)
              << "\" has no inbox row in " << options.schema.table("processed_events")
              << " (a misspelt --consumer, another --schema, a consumer that never applied an "
                 "event, inbox rows `outbox cleanup --inbox-retention` deleted, or rows this "
                 "login may not see), so every published event reads as not applied\n";
  }
  if (flags.json) {
    nlohmann::json duplicated = nlohmann::json::array();
    for (const auto& [id, n] : r.duplicated)
      duplicated.push_back({{"event_id", id.to_string()}, {"copies", n}});
    const nlohmann::json out = {
        {flags.destination().first, flags.destination().second},
        {"since", options.since},
        {"until", options.until},
        {"rows", r.rows},
        {"published", r.published},
        {"pending", r.pending},
        {"skipped", r.skipped},
        {"messages", r.messages},
        {"foreign_messages", r.foreign},
        {"lost", ids_json(r.lost)},
        {"phantom", ids_json(r.phantom)},
        {"duplicated", duplicated},
        {"not_applied", ids_json(r.not_applied)},
        {"consumer_known",
         options.consumer ? nlohmann::json(r.consumer_known) : nlohmann::json(nullptr)},
        {"table_less_registered", r.table_less_registered},
        {"ok", !r.loss()}};
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << fmt::format(
        "audit of {}: {} row(s) occurred in the window ({} published, {} pending, {} skipped); "
        "{} message(s) read ({} without an outbox event id)\n",
        destination, r.rows, r.published, r.pending, r.skipped, r.messages, r.foreign);
    std::cout << fmt::format("lost {}, phantom {}, duplicated {}", r.lost.size(), r.phantom.size(),
                             r.duplicated.size());
    if (options.consumer)
      std::cout << fmt::format(", not applied by {} {}", flags.consumer, r.not_applied.size());
    std::cout << "\n";
    print_ids("lost (published, not on the topic)", r.lost);
    print_ids("phantom (on the topic, never committed)", r.phantom);
    std::vector<EventId> duplicated;
    for (const auto& [id, n] : r.duplicated) duplicated.push_back(id);
    print_ids("duplicated", duplicated);
    print_ids("not applied (or not yet)", r.not_applied);
    if (r.table_less_registered && !r.phantom.empty()) {
      std::cout << "note: a table-less slot is registered; events of table-less producers have "
                   "no row unless materialized, so they show as phantoms here\n";
    }
    // "ok" only for a window that held something: an empty one is said below, not passed.
    if (r.rows > 0 || r.messages > 0) std::cout << (r.loss() ? "audit: LOSS\n" : "audit: ok\n");
  }
  if (r.rows == 0 && r.messages == 0) {
    // A misspelt topic or template must not read as a clean bill of health.
    if (flags.sink != "kafka") {
      std::cerr << "audit: nothing to audit: no row occurred in the window and " << destination
                << " holds no message from it" << std::endl;
    } else {
      std::cerr << "audit: nothing to audit: no row of the window renders to topic " << flags.topic
                << " (--topic-template " << flags.topic_template
                << ") and the topic holds no message from the window; check both" << std::endl;
    }
    return 4;  // apart from an error (2 from outbox, 3 from elsewhere)
  }
  return r.loss() ? 1 : 0;
}

}  // namespace

void register_audit(Commands& commands) {
  auto [audit, flags] = commands.add<AuditFlags>(
      "audit",
      "check a window: outbox rows against the topic and a consumer's inbox (lost, phantom, "
      "duplicated, not applied); exit 1 on loss, 4 when there was nothing to audit",
      &run_audit);
  Commands::add_database_options(audit, flags->db, flags->schema);
  Commands::add_kafka_options(audit, flags->kafka);
  audit->add_option("--topic", flags->topic, "the topic to audit (--sink kafka)");
  audit
      ->add_option("--sink", flags->sink,
                   "kafka (a topic), nats (a JetStream stream, read by time without consuming) "
                   "rabbitmq (a stream queue bound to the exchange, read by time) or redis (the "
                   "streams of --redis-stream-template, read by range)")
      ->check(CLI::IsMember({"kafka", "nats", "rabbitmq", "redis"}))
      ->capture_default_str();
  audit->add_option("--nats-servers", flags->nats.servers, "with --sink nats: server URLs")
      ->capture_default_str();
  audit->add_option("--nats-stream", flags->nats.stream, "with --sink nats: the stream")
      ->capture_default_str();
  audit->add_option("--nats-credentials-file", flags->nats.credentials_file,
                    "with --sink nats: a .creds file");
  audit->add_option("--nats-ca-file", flags->nats.ca_file,
                    "with --sink nats: PEM bundle for tls:// servers");
  audit->add_option("--rabbitmq-url", flags->rabbitmq.url, "with --sink rabbitmq: amqp://...")
      ->capture_default_str();
  audit->add_option("--rabbitmq-audit-queue", flags->rabbitmq.stream_queue,
                    "with --sink rabbitmq: a stream queue (x-queue-type=stream) bound to the "
                    "relays' exchange with #");
  audit->add_option("--redis-url", flags->redis.url, "with --sink redis: redis://...")
      ->capture_default_str();
  audit
      ->add_option("--redis-stream-template", flags->redis.stream_template,
                   "with --sink redis: the relays' stream template (every stream it names is read)")
      ->capture_default_str();
  audit->add_option("--topic-template", flags->topic_template,
                    "the relays' --topic-template: which rows belong to the topic");
  audit
      ->add_option("--since", flags->since,
                   "events that occurred from: a timestamp (2026-12-01T18:00:00Z) or a duration "
                   "ago (1h)")
      ->required();
  audit->add_option("--until", flags->until, "... until (default: now)");
  audit->add_option("--consumer", flags->consumer, "an inbox consumer name to check too");
  audit->add_option("--slack", flags->slack,
                    "read the topic from this long before --since (publishing follows commit)");
  audit->add_option("--read-timeout", flags->read_timeout, "how long reading the topic may take");
  audit->add_flag("--from-beginning", flags->from_beginning,
                  "read the topic from its first message, not from --since by timestamp (for "
                  "brokers without timestamp lookups, such as librdkafka's mock)");
  audit->add_flag("--json", flags->json, "one JSON object");
  commands.add_password_file_option(audit);
}

}  // namespace outbox::cli
