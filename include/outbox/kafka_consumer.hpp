#pragma once
// The Kafka inbox consumer: applies outbox events from Kafka exactly once through an Inbox.
// Part of the outbox::kafka target (links librdkafka).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/consumed_event.hpp"
#include "outbox/event.hpp"
#include "outbox/health.hpp"
#include "outbox/inbox.hpp"
#include "outbox/stats.hpp"
#include "outbox/upcaster.hpp"

namespace outbox {

// What a consumer does when the next message of a partition is gone from the broker: its
// committed offset is below the partition's log start, because the consumer fell behind the
// topic's retention (retention.ms or retention.bytes) or the topic was recreated. The messages in
// between were never applied; librdkafka's own answer (auto.offset.reset) would go on from the log
// start without a word. Also a gap: the group has no committed offset (Kafka forgets a group's
// offsets after offsets.retention.minutes without members), the partition no longer starts at
// offset 0, and this consumer's inbox has applied events before (its size is then unknown).
enum class OffsetGapPolicy {
  // The partition stops: nothing after the gap is applied, so no aggregate of that partition sees
  // a later event before the missing ones. Health::partition_stopped and last_error say which
  // partition, from which offset to which and how many messages; the other partitions go on.
  // Recover (docs/OPERATIONS.md, OutboxConsumerOffsetGap): restart the consumer once with `skip`
  // and replay the missing events with `outbox replay`.
  stop,
  // Go on from the log start. Logged as an error and counted like `stop`; the skipped events must
  // be replayed from the outbox table, and come after later events of their aggregates.
  skip,
};

struct KafkaConsumerOptions {
  std::string brokers;
  std::string group_id;
  std::vector<std::string> topics;  // names or "^regex"
  std::string database_url;         // where the inbox and the effects live
  SchemaName schema;
  std::string consumer_name;  // inbox scope; default: group_id
  // Per-aggregate order (the gap-aware inbox; outbox/inbox.hpp). Off by default in the library;
  // `outbox consume` turns it on.
  InboxOrdering ordering;
  // Steps that bring an older schema_version's payload to the one the effect is written for;
  // an event of a newer version is parked (gap-aware) or retried (not), never applied.
  Upcasters upcasters;
  std::map<std::string, std::string> properties;  // extra librdkafka properties
  // run(): delay after a failed batch (effect threw, PostgreSQL down), doubled per consecutive
  // failure up to the max.
  std::chrono::milliseconds retry_backoff_base{100};
  std::chrono::milliseconds retry_backoff_max{30000};
  OffsetGapPolicy on_offset_gap = OffsetGapPolicy::stop;
};

// What the consumer counts (outbox/stats.hpp says how a list reads).
#define OUTBOX_KAFKA_CONSUMER_STATS(X)                                                         \
  OUTBOX_CONSUMER_STATS(X)                                                                     \
  X(lag_messages, signed_gauge, always, "outbox_consumer_lag_messages", "lag {}",              \
    "Messages on the assigned partitions not yet taken; -1 while unknown.")                    \
  X(offset_gaps, counter, when_set, "outbox_consumer_offset_gaps_total", "offset gaps {}",     \
    "Partitions whose next message was gone from the broker (the consumer fell behind the "    \
    "topic's retention): stopped or skipped as on_offset_gap says.")                           \
  X(offset_gap_messages, counter, when_set, "outbox_consumer_offset_gap_messages_total",       \
    "{} message(s) in offset gaps", "Messages in those gaps: never applied by this consumer.") \
  X(partitions_stopped, gauge, when_set, "outbox_consumer_partitions_stopped",                 \
    "{} partition(s) stopped",                                                                 \
    "Partitions stopped at an offset gap (on_offset_gap=stop) until the consumer restarts.")

// Counters since the consumer started. lag_messages is the sum of each assigned partition's high
// watermark less the consumer's position (both as the client last heard them, refreshed at most
// once a second by poll()); -1 while unknown (no assignment, nothing fetched yet). offset_gaps
// counts each gap once (OffsetGapPolicy); offset_gap_messages is 0 where a gap's size is unknown.
struct KafkaConsumerStats {
  OUTBOX_KAFKA_CONSUMER_STATS(OUTBOX_STAT_FIELD)
  Health health = Health::starting;
  std::string last_error;  // latest failure (kept after recovery)
};

[[nodiscard]] std::vector<StatSample> stat_samples(const KafkaConsumerStats& stats);

// Consumes outbox events and applies `effect` through an Inbox. What one poll() receives (up to
// 500 messages) is applied in one inbox transaction; offsets are stored for commit only after it
// committed, so a crash anywhere re-delivers, and the redelivery is a no-op. Messages of one
// partition are applied in order. A partition's first start, with no committed offset, is at
// its log start; a committed offset that is no longer on the broker is an offset gap
// (OffsetGapPolicy), never a silent jump.
//
// Thread safety: one thread calls poll()/run(); request_stop() and stats() from any thread.
class KafkaInboxConsumer {
 public:
  using Effect = std::function<void(PGconn*, const ConsumedEvent&)>;

  KafkaInboxConsumer(KafkaConsumerOptions options, Effect effect);
  ~KafkaInboxConsumer();
  KafkaInboxConsumer(const KafkaInboxConsumer&) = delete;
  KafkaInboxConsumer& operator=(const KafkaInboxConsumer&) = delete;

  // Processes what arrives within `max_wait`; returns how many messages it handled.
  // When an effect throws, nothing of the batch commits, every partition of the batch is rewound
  // to its first message in it, and the exception propagates: the batch comes again, whether the
  // caller polls on or restarts.
  // Throws DatabaseError when PostgreSQL fails (the next poll() reconnects first, and throws
  // while it cannot), BrokerError when the Kafka client is unusable.
  std::size_t poll(std::chrono::milliseconds max_wait);
  // Polls until request_stop(), then commits stored offsets and leaves the group. Survives
  // failures: a PostgreSQL outage (Health::database_unavailable: reconnects), a broker outage
  // (Health::broker_unavailable: librdkafka reconnects; an unusable client is replaced) and an
  // effect that throws (Health::effect_failing: the batch is retried). Each waits with capped
  // exponential backoff and nothing is skipped meanwhile. An effect that throws for a message
  // forever blocks its partition: catch what you can never apply and record it yourself.
  // Throws only for errors no retry can fix (e.g. a missing inbox table).
  void run();
  void request_stop() noexcept;
  [[nodiscard]] KafkaConsumerStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
