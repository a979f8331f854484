#pragma once
// The Redis Streams inbox consumer: applies outbox events from streams through a consumer group
// exactly once through an Inbox. Part of the outbox::redis target.
//
// A consumer group hands each entry of a stream to one of its consumers, whichever asks: two
// consumers reading one stream would split an aggregate's events and apply them in any order.
// So each stream is read by one process of the group at a time: a process holds a lock per
// stream ("<stream>:outbox-lock:<group>", its value a token of the process, renewed every
// lease/4, free again when not renewed for the lease) and reads only the streams it holds, by a
// script that reads a stream only while the server holds its lock for this process: a process
// paused past its lease takes nothing when it wakes. Give several processes the same list: they
// share the streams out by who takes which lock first; a dead one's streams are taken over after
// the lease, a stopped one's (destructor) at once. A restarted process is a new holder too: it
// takes its streams back after the lease.
//
// Per stream, in order: a process that takes a stream first claims every entry the group had
// handed out and not seen acknowledged (XAUTOCLAIM: their holder is gone), then reads those again,
// and only then new ones; a failed batch is read again the same way. What arrives in a poll (up
// to `batch` entries) is applied in one inbox transaction; after the commit the entries are
// acknowledged (XACK). A crash before the XACK leaves them pending: read again first, and the
// inbox makes the repeat a no-op. A process that finds its lock may have lapsed (by its own clock,
// a quarter of the lease early) before it begins the inbox transaction throws the batch away
// unapplied; one that lapses during the transaction commits it, and its new holder's repeat is a
// no-op (a transaction longer than a quarter of the lease can apply a batch after the new
// holder applied later entries: keep batches short).
//
// The group is created at the start of each stream when missing (XGROUP CREATE ... 0 MKSTREAM).
// The sink's retention never trims an entry a group has not acknowledged; a group created later
// starts from what the retention left.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "outbox/consumed_event.hpp"
#include "outbox/health.hpp"
#include "outbox/inbox.hpp"
#include "outbox/schema.hpp"
#include "outbox/stats.hpp"
#include "outbox/upcaster.hpp"

namespace outbox {

struct RedisConsumerOptions {
  std::string url = "redis://127.0.0.1:6379/0";
  // The streams to read, e.g. outbox:order:0 ... outbox:order:15 (redis_streams() makes them).
  std::vector<std::string> streams;
  std::string group = "outbox";
  std::string consumer;      // this process's name in the group; default: host name and pid
  std::string database_url;  // where the inbox and the effects live
  SchemaName schema;
  std::string consumer_name;  // inbox scope; default: the group
  // Per-aggregate order (the gap-aware inbox; outbox/inbox.hpp). Off by default in the library;
  // `outbox consume` turns it on.
  InboxOrdering ordering;
  // Steps that bring an older schema_version's payload to the one the effect is written for;
  // an event of a newer version is parked (gap-aware) or retried (not), never applied.
  Upcasters upcasters;
  int batch = 100;                         // entries per inbox transaction; 1 to 10000
  std::chrono::milliseconds lease{30000};  // a stream's lock lapses this long after its holder
  std::chrono::milliseconds retry_backoff_base{100};
  std::chrono::milliseconds retry_backoff_max{30000};
  std::chrono::milliseconds connect_timeout{2000};
};

// "outbox:{aggregate_type}:{partition}" with the type and each partition 0..partitions-1: the
// streams the sink writes for one aggregate type.
std::vector<std::string> redis_streams(const std::string& stream_template,
                                       const std::string& aggregate_type, std::uint32_t partitions);

// What the Redis consumer counts (outbox/stats.hpp says how a list reads).
#define OUTBOX_REDIS_CONSUMER_STATS(X)                                                          \
  OUTBOX_CONSUMER_STATS(X)                                                                      \
  OUTBOX_CONSUMER_REDELIVERY_STATS(X)                                                           \
  X(redis_claimed, counter, when_set, "outbox_consumer_redis_claimed_total", "claimed {}",      \
    "Entries taken over from another consumer of the group that stopped before acknowledging "  \
    "them.")                                                                                    \
  X(redis_streams_held, gauge, always, "outbox_consumer_redis_streams_held", "streams held {}", \
    "Streams whose lock this consumer holds (reads).")

struct RedisConsumerStats {
  OUTBOX_REDIS_CONSUMER_STATS(OUTBOX_STAT_FIELD)
  Health health = Health::starting;
  std::string last_error;
};

[[nodiscard]] std::vector<StatSample> stat_samples(const RedisConsumerStats& stats);

// Thread safety: one thread calls poll()/run(); request_stop() and stats() from any thread.
class RedisInboxConsumer {
 public:
  using Effect = std::function<void(PGconn*, const ConsumedEvent&)>;

  // Throws ConfigError for unusable options. Connects on the first poll.
  RedisInboxConsumer(RedisConsumerOptions options, Effect effect);
  ~RedisInboxConsumer();
  RedisInboxConsumer(const RedisInboxConsumer&) = delete;
  RedisInboxConsumer& operator=(const RedisInboxConsumer&) = delete;

  // Takes what arrives within `max_wait` and applies it; returns how many entries it handled.
  // When the batch fails it stays pending (read again first) and the exception propagates.
  // Throws DatabaseError when PostgreSQL fails, BrokerError when Redis cannot be reached.
  std::size_t poll(std::chrono::milliseconds max_wait);
  // Polls until request_stop(); survives PostgreSQL and Redis outages and failing effects
  // (capped backoff, health says which). Throws only what no retry can fix.
  void run();
  void request_stop() noexcept;
  [[nodiscard]] RedisConsumerStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
