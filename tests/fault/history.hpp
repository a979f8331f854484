#pragma once
// The checker: what the producers know they committed, against what reached the outbox table, the
// topic and the consumer's effects. Plain set arithmetic, Jepsen-style.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/kafka_reader.hpp"

namespace outbox::campaign {

struct HistoryInput {
  std::string database_url;
  std::string brokers;
  std::string topic;
  std::vector<std::string> transaction_logs;  // the producers' logs (see workers.hpp)
  std::vector<std::string> relay_logs;        // searched for fenced completions
  // The retention cleanup ran with (deleted rows are recorded in campaign.cleaned).
  std::chrono::milliseconds cleanup_retention{0};
  // What reached the topic; unset: read from the broker at the end (testing::read_whole_topic).
  std::function<std::vector<testing::ReadMessage>()> read_topic;
};

struct HistoryReport {
  std::uint64_t ok = 0, failed = 0, unknown = 0;  // producer transactions by what they saw
  std::uint64_t intents = 0;                      // events of committed transactions
  std::uint64_t lost = 0;                         // committed, but no intent or never applied
  std::uint64_t phantom = 0;                      // published or applied, never committed
  std::uint64_t rolled_back_intents = 0;          // aborted, yet an outbox row exists
  std::uint64_t duplicate_publishes = 0;          // allowed: at-least-once
  std::uint64_t duplicate_effects = 0;
  std::uint64_t inversions = 0;  // per aggregate: applied or first published out of sequence
  // Offsets the checker never read (a partition that starts past 0, skips offsets or stops short
  // of its end): the broker dropped them, so first-publication order cannot be checked there.
  std::uint64_t unread_messages = 0;
  // Read by the tail (HistoryInput::read_topic), no longer held by the broker at the end: not a
  // violation, what a checker reading the topic only at the end would have missed.
  std::uint64_t dropped_by_broker = 0;
  std::uint64_t fenced = 0;         // relay completions refused by fencing (expected, counted)
  std::uint64_t stuck = 0;          // still pending after the drain
  std::uint64_t cleaned = 0;        // rows deleted by the retention cleanup
  std::uint64_t cleaned_early = 0;  // deleted while pending or inside the retention: must be 0
  double drain_seconds = 0;         // from the producers' stop until every committed event applied
  std::vector<std::string> examples;  // the first violations, to start a post-mortem
  [[nodiscard]] std::uint64_t violations() const {
    return lost + phantom + rolled_back_intents + duplicate_effects + inversions + unread_messages +
           stuck + cleaned_early;
  }
};

// Resolves unknown commits by transaction id, waits for every committed event to be applied (as
// long as the consumer makes progress at least once per `drain`), then computes the report.
HistoryReport check_history(const HistoryInput& input, std::chrono::seconds drain);

}  // namespace outbox::campaign
