#include "rabbitmq/rabbitmq_message.hpp"

#include <ctime>
#include <nlohmann/json.hpp>

#include "common/ascii_case.hpp"
#include "sinks/cloudevents.hpp"

namespace outbox::rabbitmq {
namespace {

// Names a writer of the outbox table may not set: outbox's own (the consumer reads them), the
// CloudEvents binding's, and "x-" ones, which steer the broker (x-delay, x-match, x-death).
bool is_reserved_header(const std::string& name) {
  const std::string lower = detail::ascii_lower(name);
  return lower.starts_with("x-") || lower == "event_id" || lower == "event_type" ||
         lower == "aggregate_type" || lower == "aggregate_id" || lower == "aggregate_sequence" ||
         lower == "schema_version" || lower.starts_with("cloudevents_") ||
         lower.starts_with("cloudevents:");
}

}  // namespace

Table message_headers(const Event& event, const std::string& id,
                      const std::string& cloudevents_source) {
  Table headers;
  headers.add_text("event_id", id);
  headers.add_text("event_type", event.event_type);
  headers.add_text("aggregate_type", event.aggregate_type);
  headers.add_text("aggregate_id", event.aggregate_id);
  headers.add_int64("aggregate_sequence", event.aggregate_sequence);
  headers.add_int64("schema_version", event.schema_version);
  if (!cloudevents_source.empty()) {
    for (const auto& [name, value] : detail::cloudevents_attributes(event, cloudevents_source)) {
      headers.add_text("cloudEvents_" + name, value);
    }
  }
  if (event.headers.empty() || event.headers == "{}") return headers;
  const auto extra = nlohmann::json::parse(event.headers, nullptr, false);
  if (!extra.is_object()) return headers;
  for (const auto& [key, value] : extra.items()) {
    if (!value.is_string() || key.empty() || key.size() > 128 || is_reserved_header(key)) {
      continue;
    }
    headers.add_text(key, value.get<std::string>());
  }
  return headers;
}

amqp_basic_properties_t message_properties(const Event& event, const std::string& id,
                                           Table& headers) {
  amqp_basic_properties_t properties{};
  properties._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                      AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_APP_ID_FLAG |
                      AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
  properties.content_type = bytes("application/json");
  properties.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  properties.message_id = bytes(id);
  properties.type = bytes(event.event_type);
  properties.app_id = bytes("outbox");
  properties.timestamp = static_cast<std::uint64_t>(std::time(nullptr));  // the audit's clock
  properties.headers = headers.get();
  return properties;
}

}  // namespace outbox::rabbitmq
