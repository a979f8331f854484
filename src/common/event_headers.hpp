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

// The bytes outbox's own headers add to a message: their names and values, as the Kafka sink
// sets them. The sequence is not known before the insert: its longest form (19 digits) counts.
inline std::size_t outbox_header_bytes(std::string_view event_type, std::string_view aggregate_type,
                                       std::int32_t schema_version) {
  constexpr std::size_t kEventIdText = 36;  // the canonical UUID form
  constexpr std::size_t kLongestSequence = 19;
  std::size_t bytes = 0;
  for (const char* name : kReservedHeaders) bytes += std::string_view(name).size();
  return bytes + kEventIdText + event_type.size() + aggregate_type.size() + kLongestSequence +
         std::to_string(schema_version).size();
}

}  // namespace outbox::detail
