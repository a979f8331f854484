#pragma once
// The RabbitMQ sink: the relay publishes each event to an exchange (rabbitmq-c, AMQP 0-9-1) with
// publisher confirms, and takes the broker's basic.ack as the acknowledgement. Part of the
// outbox::rabbitmq target.
//
// What a confirm means: the broker routed the message and every queue it went to has it: for a
// persistent message (every message here is) in a durable classic queue, written to disk; in a
// quorum queue, written and fsynced by a majority of its replicas. A message that reached no
// queue is returned (mandatory) before its ack: that is a failure, retried with backoff and
// counted (rabbitmq_returns), never a publish. A basic.nack (the broker could not take it, a
// queue with overflow=reject-publish is full) is a failure too. No confirm within the confirm
// timeout, or a connection or channel lost with sends unconfirmed, is an unknown outcome: sent
// again. RabbitMQ deduplicates nothing: such a resend can be a second copy in the queue, which
// the consumer's inbox recognises by message_id (= the event id) and applies once.
//
// An event whose headers do not fit one AMQP frame (128 KiB) is refused for good (quarantined).
//
// Routing keys: the template may hold {aggregate_type}, {event_type} and {partition}, never the
// aggregate id (outbox/partition.hpp; the NATS sink has the same rule). Per-aggregate order to
// consumers: bind one quorum queue with single active consumer per partition range (or one for
// all), e.g. queue "orders.3" bound with "order.3"; every event of an aggregate goes through one
// queue, in publish order, and only one consumer at a time takes from it (RabbitMqInboxConsumer
// declares its queue that way).
//
// Properties: delivery_mode 2 (persistent), message_id = the event id, type = the event type,
// timestamp = when it was sent (seconds; the audit reads a stream queue by it),
// content_type application/json, app_id "outbox"; headers event_id, event_type, aggregate_type,
// aggregate_id, aggregate_sequence (64-bit integer), schema_version, the event's own string
// headers (not those names, none beginning "x-": a writer of the table must not steer the broker),
// and with a CloudEvents source the AMQP binding's application properties (cloudEvents_id,
// cloudEvents_source, ... as the binding's current "cloudEvents_" prefix).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox {

struct RabbitMqSinkOptions {
  // amqp://user:password@host:port/vhost ("/" at the end: the vhost "/").
  std::string url = "amqp://guest:guest@127.0.0.1:5672/";
  std::string exchange = "outbox";
  std::string routing_key_template = "{aggregate_type}.{partition}";
  std::uint32_t partitions = 16;  // for {partition}: 1 to 4096
  // Declare the exchange (a durable topic exchange) when it does not exist; without it, a missing
  // exchange stops the relay with what to do.
  bool declare_exchange = false;
  std::chrono::milliseconds confirm_timeout{5000};  // no confirm by then: an unknown outcome
  // The relay's lease: a send must end before it. 0: not checked.
  std::chrono::milliseconds max_confirm_timeout{0};
  std::chrono::milliseconds connect_timeout{2000};
  // No AMQP heartbeats: rabbitmq-c sends them only from inside its calls, and the relay calls
  // the sink only while it has something to send, so an idle relay would be disconnected for
  // missing them. A silent broker is found by the confirm timeout instead.
  std::chrono::seconds heartbeat{0};
  // A send waits at most this long for room in the connection's socket buffer (a broker that
  // stopped reading: flow control, an alarm, a stalled node); then it fails, retried later,
  // rather than block the relay. rabbitmq-c's own writes wait for ever.
  std::chrono::milliseconds send_room_wait{300};
  std::string cloudevents_source{};  // non-empty: the CloudEvents AMQP binding's properties
};

// Throws ConfigError for an unusable URL, template, partition count or timeout. Does not wait for
// the broker: it connects on the first send, and again after a lost connection (at most once a
// second); a missing exchange (without declare_exchange), a refused login or vhost stop the relay
// with a ConfigError that says what to change.
std::unique_ptr<Sink> make_rabbitmq_sink(const RabbitMqSinkOptions& options);

// The routing key `event` is published with (exposed for tests and tools).
std::string render_rabbitmq_routing_key(const RabbitMqSinkOptions& options, const Event& event);

}  // namespace outbox
