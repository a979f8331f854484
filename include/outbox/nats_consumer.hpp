#pragma once
// The NATS JetStream inbox consumer: applies outbox events from a stream exactly once through an
// Inbox. Part of the outbox::nats target.
//
// A durable pull consumer with explicit acks. What one fetch brings (up to `batch` messages) is
// applied in one inbox transaction, in stream order; each message is acknowledged only after that
// transaction committed, so a crash anywhere redelivers and the inbox makes the redelivery a
// no-op. When the batch fails (the effect threw, PostgreSQL failed) every message of it is
// negatively acknowledged in order, and the consumer waits its backoff before fetching again.
//
// Per-aggregate order: a failed batch is nak'd whole, and JetStream serves redeliveries before
// new messages, so it comes back in stream order before anything after it (max_ack_pending is the
// batch size). Messages delivered and never acknowledged by anyone (a fetch's answer lost with a
// server that died, a consumer process killed mid-batch) come again only after ack_wait: after
// each (re)connect, and after an ack the server did not confirm, the consumer fetches nothing
// new while the consumer state shows any outstanding, until ack_wait has passed
// (redelivery_waits counts it). One process per durable consumer: two processes fetching from
// one durable consumer would split an aggregate's events between them. To spread the load, give
// each process its own durable consumer over a subject filter of its partitions, e.g.
// "outbox.order.3" with the sink's {partition}.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "outbox/consumed_event.hpp"
#include "outbox/health.hpp"
#include "outbox/inbox.hpp"
#include "outbox/schema.hpp"
#include "outbox/stats.hpp"
#include "outbox/upcaster.hpp"

namespace outbox {

struct NatsConsumerOptions {
  std::string servers = "nats://127.0.0.1:4222";
  std::string stream = "OUTBOX";
  std::string durable;                        // the JetStream consumer's name (no dots)
  std::string filter_subject = "outbox.*.*";  // what of the stream it reads
  std::string database_url;                   // where the inbox and the effects live
  SchemaName schema;
  std::string consumer_name;  // inbox scope; default: durable
  // Per-aggregate order (the gap-aware inbox; outbox/inbox.hpp). Off by default in the library;
  // `outbox consume` turns it on.
  InboxOrdering ordering;
  // Steps that bring an older schema_version's payload to the one the effect is written for;
  // an event of a newer version is parked (gap-aware) or retried (not), never applied.
  Upcasters upcasters;
  int batch = 100;  // messages per fetch and per inbox transaction; 1 to 10000
  // A message not acknowledged by then (a consumer killed mid-batch) is delivered again.
  std::chrono::milliseconds ack_wait{30000};
  std::chrono::milliseconds retry_backoff_base{100};
  std::chrono::milliseconds retry_backoff_max{30000};
  std::string credentials_file;
  std::string ca_file;
};

// What the NATS consumer counts (outbox/stats.hpp says how a list reads).
#define OUTBOX_NATS_CONSUMER_STATS(X)                                                         \
  OUTBOX_CONSUMER_STATS(X)                                                                    \
  OUTBOX_CONSUMER_REDELIVERY_STATS(X)                                                         \
  X(redelivery_waits, counter, when_set, "outbox_consumer_redelivery_waits_total",            \
    "redelivery waits {}",                                                                    \
    "Times the consumer fetched nothing new until messages delivered and never acknowledged " \
    "(a lost fetch answer, a killed consumer) came again.")                                   \
  X(pending_messages, signed_gauge, always, "outbox_consumer_pending_messages", "pending {}", \
    "Messages of the stream the consumer has not been delivered yet; -1 while "               \
    "unknown.")

struct NatsConsumerStats {
  OUTBOX_NATS_CONSUMER_STATS(OUTBOX_STAT_FIELD)
  Health health = Health::starting;
  std::string last_error;
};

[[nodiscard]] std::vector<StatSample> stat_samples(const NatsConsumerStats& stats);

// Thread safety: one thread calls poll()/run(); request_stop() and stats() from any thread.
class NatsInboxConsumer {
 public:
  using Effect = std::function<void(PGconn*, const ConsumedEvent&)>;

  // Throws ConfigError for unusable options. Creates the durable consumer when it does not exist
  // (explicit acks, the whole stream from its start, max_ack_pending = batch); an existing one
  // whose settings would break order or acks is refused.
  NatsInboxConsumer(NatsConsumerOptions options, Effect effect);
  ~NatsInboxConsumer();
  NatsInboxConsumer(const NatsInboxConsumer&) = delete;
  NatsInboxConsumer& operator=(const NatsInboxConsumer&) = delete;

  // Fetches what arrives within `max_wait` and applies it; returns how many messages it handled.
  // When the batch fails, it is negatively acknowledged and the exception propagates.
  // Throws DatabaseError when PostgreSQL fails, BrokerError when the server cannot be reached.
  std::size_t poll(std::chrono::milliseconds max_wait);
  // Polls until request_stop(); survives PostgreSQL and server outages and failing effects
  // (capped backoff, health says which). Throws only what no retry can fix.
  void run();
  void request_stop() noexcept;
  [[nodiscard]] NatsConsumerStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
