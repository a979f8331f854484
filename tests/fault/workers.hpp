#pragma once
// The processes the campaign kills: producers writing transactions, a consumer applying effects.
// Each runs until SIGTERM and survives lost connections by reconnecting.

#include <string>

namespace outbox::campaign {

inline constexpr const char* kSchema = "campaign";
inline constexpr const char* kTopic = "outbox.account";

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
};

// Writes one line per step of each transaction to log_path, flushed by write(2) before the step
// it announces: "pending <txid> <event ids...>", then "ok <txid>", "rolledback <txid>",
// "failed <txid>" (certainly not committed) or "unknown <txid>" (COMMIT's outcome lost).
int run_producer(const WorkerOptions& options);

// Applies every event of kTopic through the inbox into campaign.effects.
int run_consumer(const WorkerOptions& options);

// Creates the consumer's tables (idempotent).
void create_campaign_tables(const std::string& database_url);

}  // namespace outbox::campaign
