#pragma once
// Human durations for flags and configuration: "500ms", "30s", "15m", "24h", "7d", "1h30m", "0".

#include <chrono>
#include <string_view>

namespace outbox {

// Throws InvalidArgument saying what is wrong (empty, no unit, unknown unit, negative, too large).
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace outbox
