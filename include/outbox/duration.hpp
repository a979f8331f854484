#pragma once
// Human durations for flags and configuration: "500ms", "30s", "15m", "24h", "7d", "1h30m", "0".

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace outbox {

// The longest duration parse_duration accepts: ten years.
inline constexpr std::int64_t kMaxDurationDays = 3650;

// Throws InvalidArgument saying what is wrong (empty, no unit, unknown unit, negative, longer than
// kMaxDurationDays).
std::chrono::milliseconds parse_duration(std::string_view text);

// `value` as a flag writes it, largest units first: "1h30m", "500ms", "7d", "0" (parse_duration
// reads it back when it is not negative and at most kMaxDurationDays).
std::string format_duration(std::chrono::milliseconds value);

// Throws InvalidArgument when `value` is outside [min, max]: "<what> of 3650d is out of range:
// give 100ms to 1h" and then `why` (if any) after a semicolon. `what` names the setting as the
// caller knows it, e.g. "--backlog-refresh" or "audit: --read-timeout".
void check_duration_range(std::chrono::milliseconds value, std::chrono::milliseconds min,
                          std::chrono::milliseconds max, std::string_view what,
                          std::string_view why = {});

// The same message, or "" when `value` is in range: for a caller that throws its own error type.
[[nodiscard]] std::string duration_range_problem(std::chrono::milliseconds value,
                                                 std::chrono::milliseconds min,
                                                 std::chrono::milliseconds max,
                                                 std::string_view what, std::string_view why = {});

}  // namespace outbox
