#pragma once
// An outbox event as a RabbitMQ message: its headers table and its basic properties
// (include/outbox/rabbitmq_sink.hpp says what each carries).

#include <amqp.h>

#include <string>

#include "outbox/event.hpp"
#include "rabbitmq/amqp_common.hpp"

namespace outbox::rabbitmq {

// The headers: outbox's own, the CloudEvents AMQP binding's with a non-empty `cloudevents_source`,
// and the event's own string headers except outbox's names and any beginning "x-".
Table message_headers(const Event& event, const std::string& id,
                      const std::string& cloudevents_source);

// Persistent, message_id = `id`, type, content type, app id, timestamp (now) and `headers`; the
// result points into `event`, `id` and `headers`.
amqp_basic_properties_t message_properties(const Event& event, const std::string& id,
                                           Table& headers);

}  // namespace outbox::rabbitmq
