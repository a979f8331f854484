#pragma once
// Reads a timestamptz as PostgreSQL prints it in the ISO styles ("2026-12-01 18:07:01.123456+00",
// "2026-12-01T18:07:01.5+05:30" from to_json). For measurements (commit-to-ack latency): anything
// else, a DateStyle other than ISO among them, is nullopt, never a guess.

#include <chrono>
#include <optional>
#include <string_view>

namespace outbox::detail {

std::optional<std::chrono::system_clock::time_point> parse_timestamptz(std::string_view text);

}  // namespace outbox::detail
