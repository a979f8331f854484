#pragma once
// The Kafka sink: the relay publishes through librdkafka's idempotent producer. Part of the
// outbox::kafka target (links librdkafka); outbox::outbox alone does not need it.

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox {

struct KafkaSinkOptions {
  std::string brokers;  // bootstrap.servers, "host:port,host:port"
  // Topic per event. Placeholders: {aggregate_type}, {event_type}. Default
  // "outbox.{aggregate_type}".
  std::string topic_template = "outbox.{aggregate_type}";
  // Extra librdkafka properties (e.g. security.protocol, linger.ms). enable.idempotence=true and
  // acks=all are always set; a property that would weaken a guarantee is a ConfigError (another
  // acks or idempotence, a partitioner that does not map a key to one partition, a
  // transactional.id, a LIFO queue, a message timeout of 0 or not below max_message_timeout).
  std::map<std::string, std::string> properties;
  // The relay's lease: a send must time out before it, or another relay could publish the event
  // and its successor first. 0: not checked. The default message timeout is 20 s.
  std::chrono::milliseconds max_message_timeout{0};
  // Non-empty: every message also carries the CloudEvents 1.0 Kafka binding's binary-mode
  // headers (ce_specversion, ce_id, ce_source = this, ce_type, ce_subject, ce_time and the
  // extensions ce_aggregatetype, ce_aggregatesequence, ce_schemaversion; content-type
  // application/json; the key is the partitionkey), so a CloudEvents SDK reads each message as
  // an event. They add about 300 bytes per message that the producer's size check does not count:
  // leave that room below message.max.bytes (ProducerOptions::max_event_bytes).
  std::string cloudevents_source{};
};

// Throws ConfigError for an unknown or contradictory property, or an unusable topic template.
// The message key is aggregate_id (one aggregate stays on one partition); headers carry event_id,
// event_type, aggregate_type, aggregate_sequence, schema_version and the event's own headers.
std::unique_ptr<Sink> make_kafka_sink(const KafkaSinkOptions& options);

// The topic an event goes to under `topic_template` (exposed for tests and tools).
std::string render_topic(const std::string& topic_template, const Event& event);

}  // namespace outbox
