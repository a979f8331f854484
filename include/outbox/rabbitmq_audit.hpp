#pragma once
// The delivery audit of RabbitMQ (outbox/audit.hpp): over a window, the outbox rows against the
// messages of a stream queue bound to the sink's exchange, and a consumer's inbox. Part of
// outbox::rabbitmq.
//
// A classic or quorum queue cannot be read without taking its messages from its consumers, so the
// audit reads a stream queue: declare one (x-queue-type=stream, an x-max-age as long as you want
// to audit back) and bind it to the exchange with "#"; it then holds a copy of every routed
// message, and the audit reads it from `since` less the slack by time (x-stream-offset) without
// removing anything. A message's time is its AMQP timestamp (whole seconds, set by the sink).
// Every row of the window counts as the exchange's.

#include <string>

#include "outbox/audit.hpp"

namespace outbox {

struct RabbitMqAuditOptions : AuditWindow {
  std::string url = "amqp://guest:guest@127.0.0.1:5672/";
  std::string stream_queue;  // a stream queue bound to the relays' exchange
};

// Throws InvalidArgument for a window PostgreSQL cannot read or a stream queue that does not
// exist, DatabaseError, BrokerError (the queue could not be read within read_timeout).
AuditReport audit_rabbitmq_stream(const RabbitMqAuditOptions& options);

}  // namespace outbox
