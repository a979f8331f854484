#pragma once
// The processes the campaign kills: producers writing transactions, a consumer applying effects.
// Each runs until SIGTERM and survives lost connections by reconnecting.

#include <string>

namespace outbox::campaign {

inline constexpr const char* kSchema = "campaign";
inline constexpr const char* kTopic = "outbox.account";
inline constexpr const char* kNatsStream = "CAMPAIGN";        // subjects outbox.*.*
inline constexpr const char* kRabbitMqExchange = "campaign";  // a topic exchange
// The Redis sink's streams: 16 per aggregate type (the sink's default partitions).
inline constexpr const char* kRedisStreamTemplate = "campaign:{aggregate_type}:{partition}";
inline constexpr unsigned kRedisPartitions = 16;

// The campaign topic's partitions, and its aggregates' names. librdkafka's mock keeps at most
// 5 MiB per partition and drops the oldest messages beyond that, as a broker does past
// retention.bytes. Two aggregates on one partition (40 names hashed at random into 48 partitions
// put five on one) fill it in a 1,040-trial run (about 13,000 events per aggregate, ~250 bytes
// each), and a consumer a few thousand messages behind then meets an offset gap: the campaign
// would test the mock's limit, not the relays. So each aggregate gets a partition of its own:
// campaign_aggregate(i) is "acct-<k>" for the i-th k whose key the relays' partitioner (murmur2,
// as Java's) puts on a partition no earlier name took.
inline constexpr int kPartitions = 48;
std::string campaign_aggregate(int index);

struct WorkerOptions {
  std::string database_url;
  std::string brokers;
  std::string log_path;  // producer: the transaction log the checker reads
  unsigned seed = 1;
  int aggregates = 40;
  int transactions_per_second = 100;
  // consumer: the topic, where to serve /metrics and the probes ("" for nowhere; the port is
  // written to the log as "metrics port N"), and on_offset_gap ("stop" or "skip").
  std::string topic = kTopic;
  std::string metrics_listen;
  std::string on_offset_gap = "stop";
  std::string nats_url;      // nats-consumer: the server
  std::string rabbitmq_url;  // rabbitmq-consumer: the broker
  std::string redis_url;     // redis-consumer: the server
};

// Writes one line per step of each transaction to log_path, flushed by write(2) before the step
// it announces: "pending <txid> <event ids...>", then "ok <txid>", "rolledback <txid>",
// "failed <txid>" (certainly not committed) or "unknown <txid>" (COMMIT's outcome lost).
int run_producer(const WorkerOptions& options);

// Applies every event of kTopic through the inbox into campaign.effects.
int run_consumer(const WorkerOptions& options);

// Applies every event of the NATS stream kNatsStream through the inbox into campaign.effects
// (durable consumer "campaign").
int run_nats_consumer(const WorkerOptions& options);

// Applies every event of the exchange kRabbitMqExchange through the inbox into campaign.effects
// (quorum queue "campaign" with single active consumer, bound with "#").
int run_rabbitmq_consumer(const WorkerOptions& options);

// Applies every event of the streams of kRedisStreamTemplate ("account") through the inbox into
// campaign.effects (group "campaign", a consumer name that survives its restarts, as a pod's).
int run_redis_consumer(const WorkerOptions& options);

// Creates the consumer's tables (idempotent).
void create_campaign_tables(const std::string& database_url);

}  // namespace outbox::campaign
