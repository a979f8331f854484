#pragma once
// The header names outbox puts on every published message. Callers' own headers may not use them
// (the producer refuses, the sinks would never let a caller's value replace outbox's).

#include <array>
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

}  // namespace outbox::detail
