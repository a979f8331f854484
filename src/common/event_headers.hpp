#pragma once
// The header names outbox puts on every published message. Callers' own headers may not use them
// (the producer refuses, the sinks would never let a caller's value replace outbox's).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace outbox::detail {

inline constexpr const char* kHeaderEventId = "event_id";
inline constexpr const char* kHeaderEventType = "event_type";
inline constexpr const char* kHeaderAggregateType = "aggregate_type";
inline constexpr const char* kHeaderAggregateSequence = "aggregate_sequence";
inline constexpr const char* kHeaderSchemaVersion = "schema_version";

inline constexpr std::array<const char*, 5> kReservedHeaders = {
    kHeaderEventId, kHeaderEventType, kHeaderAggregateType, kHeaderAggregateSequence,
    kHeaderSchemaVersion};

inline bool is_reserved_header(std::string_view name) {
  for (const char* reserved : kReservedHeaders) {
    if (name == reserved) return true;
  }
  return false;
}

// What librdkafka counts for one message against message.max.bytes (rd_kafka_msg_new0): a fixed
// framing (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD: length, attributes, timestamp and offset deltas, key
// and value lengths and the header count, each as a varint of its largest size), the key, the
// value and every header. The producer's size check counts the same way, so an event it accepts
// within message.max.bytes is never refused as too large.
inline constexpr std::size_t kKafkaMessageFraming = 36;

// A length as the zig-zag varint Kafka writes before a header's name and value.
inline std::size_t kafka_varint_bytes(std::size_t length) {
  std::uint64_t zigzag = static_cast<std::uint64_t>(length) << 1;
  std::size_t bytes = 1;
  while (zigzag >= 0x80) {
    zigzag >>= 7;
    ++bytes;
  }
  return bytes;
}

// One header as librdkafka counts it: name, value, and the two lengths before them.
inline std::size_t kafka_header_bytes(std::size_t name, std::size_t value) {
  return name + value + kafka_varint_bytes(name) + kafka_varint_bytes(value);
}

// The bytes outbox's own headers add to a message, as the Kafka sink sets them. The sequence is
// not known before the insert: its longest form (19 digits) counts.
inline std::size_t outbox_header_bytes(std::string_view event_type, std::string_view aggregate_type,
                                       std::int32_t schema_version) {
  constexpr std::size_t kEventIdText = 36;  // the canonical UUID form
  constexpr std::size_t kLongestSequence = 19;
  const auto name = [](const char* header) { return std::string_view(header).size(); };
  return kafka_header_bytes(name(kHeaderEventId), kEventIdText) +
         kafka_header_bytes(name(kHeaderEventType), event_type.size()) +
         kafka_header_bytes(name(kHeaderAggregateType), aggregate_type.size()) +
         kafka_header_bytes(name(kHeaderAggregateSequence), kLongestSequence) +
         kafka_header_bytes(name(kHeaderSchemaVersion), std::to_string(schema_version).size());
}

// Every header of an event's message: the caller's own (`own_bytes`, as scan_header_object counts
// them), traceparent when there is one, and outbox's.
inline std::uint64_t event_header_bytes(std::uint64_t own_bytes, std::string_view traceparent,
                                        std::string_view event_type,
                                        std::string_view aggregate_type,
                                        std::int32_t schema_version) {
  return own_bytes +
         (traceparent.empty()
              ? 0
              : kafka_header_bytes(std::string_view("traceparent").size(), traceparent.size())) +
         outbox_header_bytes(event_type, aggregate_type, schema_version);
}

}  // namespace outbox::detail
