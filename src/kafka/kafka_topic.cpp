#include "kafka/kafka_topic.hpp"

#include <fmt/format.h>

#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "outbox/kafka_sink.hpp"

namespace outbox {

std::string render_topic(const std::string& topic_template, const Event& event) {
  std::string topic;
  topic.reserve(topic_template.size() + 16);
  for (std::size_t i = 0; i < topic_template.size();) {
    if (topic_template.compare(i, 16, "{aggregate_type}") == 0) {
      topic += event.aggregate_type;
      i += 16;
    } else if (topic_template.compare(i, 12, "{event_type}") == 0) {
      topic += event.event_type;
      i += 12;
    } else {
      topic += topic_template[i++];
    }
  }
  return topic;
}

namespace kafka {

namespace {
constexpr std::size_t kMaxTopicLength = 249;  // Kafka's own limit (KAFKA-3219)
}  // namespace

std::string topic_problem(std::string_view topic) {
  if (topic.empty()) return "is empty";
  if (topic.size() > kMaxTopicLength) {
    return fmt::format("is {} characters long; Kafka allows at most {}", topic.size(),
                       kMaxTopicLength);
  }
  if (topic == "." || topic == "..") return "is \".\" or \"..\", which Kafka refuses";
  for (std::size_t i = 0; i < topic.size(); ++i) {
    const char c = topic[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      const auto byte = static_cast<unsigned char>(c);
      return fmt::format("has {} at position {}; Kafka allows only a-z, A-Z, 0-9, '.', '_' and '-'",
                         byte > 0x20 && byte < 0x7F ? fmt::format("the character '{}'", c)
                                                    : fmt::format("the byte 0x{:02x}", byte),
                         i);
    }
  }
  if (topic.starts_with("__")) {
    return "starts with \"__\", which Kafka reserves for its internal topics "
           "(__consumer_offsets, __transaction_state); a producer must never write there";
  }
  return {};
}

void check_topic_template(const std::string& topic_template) {
  Event probe;
  probe.aggregate_type = "x";
  probe.event_type = "x";
  const std::string topic = render_topic(topic_template, probe);
  if (const std::string problem = topic_problem(topic); !problem.empty()) {
    throw ConfigError(fmt::format(
        "topic template \"{}\" is not a Kafka topic name: with its placeholders filled in it {}. "
        "Use [a-zA-Z0-9._-] and the placeholders {{aggregate_type}} and {{event_type}}, e.g. "
        "outbox.{{aggregate_type}}",
        detail::printable(topic_template, 300), problem));
  }
}

}  // namespace kafka
}  // namespace outbox
