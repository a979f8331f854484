#pragma once
// Human durations for flags and configuration: "500ms", "30s", "15m", "24h", "7d", "1h30m", "0".

#include <chrono>
#include <cstdint>
#include <string_view>

namespace outbox {

// The longest duration parse_duration accepts: ten years.
inline constexpr std::int64_t kMaxDurationDays = 3650;

// Throws InvalidArgument saying what is wrong (empty, no unit, unknown unit, negative, longer than
// kMaxDurationDays).
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace outbox
