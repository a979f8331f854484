#pragma once
// Kafka topic names: which names Kafka takes, and the check of a topic template. Apart from the
// sink (no librdkafka here) so the rules are unit-tested and fuzzed on their own.

#include <string>
#include <string_view>

namespace outbox::kafka {

// Empty when Kafka takes `topic` as a topic to produce to; otherwise why not ("starts with "__",
// which Kafka reserves for its internal topics ..."). Kafka's rules: 1 to 249 characters of
// [a-zA-Z0-9._-], not "." or ".."; and outbox refuses Kafka's internal topics
// (__consumer_offsets, __transaction_state, anything starting with "__"), which a producer must
// never write to.
std::string topic_problem(std::string_view topic);

// Throws ConfigError when `topic_template` cannot give a legal topic (checked with the
// placeholders filled in as "x"): an illegal character, an internal topic, an empty or too long
// result. Values that make an otherwise good template illegal are refused per event at send time.
void check_topic_template(const std::string& topic_template);

}  // namespace outbox::kafka
