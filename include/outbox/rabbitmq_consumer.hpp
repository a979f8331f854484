#pragma once
// The RabbitMQ inbox consumer: applies outbox events from a queue exactly once through an Inbox.
// Part of the outbox::rabbitmq target.
//
// The queue is declared (durable; a quorum queue by default) with single active consumer and
// bound to the sink's exchange with the given routing-key patterns: however many processes
// consume it, the broker delivers to one at a time, so an aggregate's events are applied in
// publish order; the others wait and take over when it goes. To spread the load, give each
// process group its own queue bound to some partitions ("order.0" ... "order.7" with the sink's
// {partition}), never two queues to the same aggregate's key.
//
// What arrives within a poll (up to `batch` messages, the prefetch) is applied in one inbox
// transaction; after the commit the batch is acknowledged with one basic.ack (multiple). A crash
// before that ack leaves the batch unacknowledged: the broker delivers it again, first, when the
// channel closes, and the inbox makes the repeat a no-op. A failed batch (the effect threw,
// PostgreSQL failed) goes back whole by closing the connection: the broker returns every
// delivery not acknowledged, the batch and what was already on its way behind it, and delivers
// them again before anything after them (a basic.nack of the batch alone would let what was
// behind it be applied first).

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

struct RabbitMqConsumerOptions {
  std::string url = "amqp://guest:guest@127.0.0.1:5672/";
  std::string queue;                  // declared durable, with single active consumer
  std::string queue_type = "quorum";  // or "classic"
  std::string exchange = "outbox";    // the sink's
  // Routing-key patterns the queue is bound with ("#": every key). Empty: bound by the operator.
  std::vector<std::string> bindings = {"#"};
  std::string database_url;  // where the inbox and the effects live
  SchemaName schema;
  std::string consumer_name;  // inbox scope; default: the queue
  // Per-aggregate order (the gap-aware inbox; outbox/inbox.hpp). Off by default in the library;
  // `outbox consume` turns it on.
  InboxOrdering ordering;
  // Steps that bring an older schema_version's payload to the one the effect is written for;
  // an event of a newer version is parked (gap-aware) or retried (not), never applied.
  Upcasters upcasters;
  int batch = 100;  // prefetch and messages per inbox transaction; 1 to 10000
  std::chrono::milliseconds retry_backoff_base{100};
  std::chrono::milliseconds retry_backoff_max{30000};
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::seconds heartbeat{10};
};

// What the RabbitMQ consumer counts (outbox/stats.hpp says how a list reads).
#define OUTBOX_RABBITMQ_CONSUMER_STATS(X) \
  OUTBOX_CONSUMER_STATS(X)                \
  OUTBOX_CONSUMER_REDELIVERY_STATS(X)

struct RabbitMqConsumerStats {
  OUTBOX_RABBITMQ_CONSUMER_STATS(OUTBOX_STAT_FIELD)
  Health health = Health::starting;
  std::string last_error;
};

[[nodiscard]] std::vector<StatSample> stat_samples(const RabbitMqConsumerStats& stats);

// Thread safety: one thread calls poll()/run(); request_stop() and stats() from any thread.
class RabbitMqInboxConsumer {
 public:
  using Effect = std::function<void(PGconn*, const ConsumedEvent&)>;

  // Throws ConfigError for unusable options. Connects on the first poll.
  RabbitMqInboxConsumer(RabbitMqConsumerOptions options, Effect effect);
  ~RabbitMqInboxConsumer();
  RabbitMqInboxConsumer(const RabbitMqInboxConsumer&) = delete;
  RabbitMqInboxConsumer& operator=(const RabbitMqInboxConsumer&) = delete;

  // Takes what arrives within `max_wait` and applies it; returns how many messages it handled.
  // When the batch fails, it is returned to the queue and the exception propagates. Throws
  // DatabaseError when PostgreSQL fails, BrokerError when the broker cannot be reached or the
  // exchange does not exist (yet), ConfigError when the queue exists with other settings.
  std::size_t poll(std::chrono::milliseconds max_wait);
  // Polls until request_stop(); survives PostgreSQL and broker outages and failing effects
  // (capped backoff, health says which). Throws only what no retry can fix.
  void run();
  void request_stop() noexcept;
  [[nodiscard]] RabbitMqConsumerStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
