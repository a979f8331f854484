#pragma once
// Where a broker sink puts an event: a NATS subject or a RabbitMQ routing key made from a template
// of {aggregate_type}, {event_type} and {partition} (aggregate_partition of the aggregate id,
// Kafka's murmur2). Never the aggregate id itself: an id is any text (dots, spaces, wildcards) that
// a subject or a topic-exchange word cannot hold, and a subject or binding per aggregate costs the
// server memory for ever.

#include <cstdint>
#include <string>

#include "outbox/event.hpp"

namespace outbox::detail {

// Throws ConfigError, naming `broker` ("NATS subject", "RabbitMQ routing key") and `example`,
// when the template holds {aggregate_id} or an unknown placeholder.
void check_key_template(const std::string& key_template, const std::string& broker,
                        const std::string& flag, const std::string& example);

std::string render_key(const std::string& key_template, const Event& event,
                       std::uint32_t partitions);

// The template with every placeholder as `wildcard` ("*" for NATS and topic exchanges): what
// covers every key it renders.
std::string key_filter(const std::string& key_template, const std::string& wildcard);

}  // namespace outbox::detail
