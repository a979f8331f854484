#include "outbox/duration.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <utility>

#include "common/printable.hpp"
#include "outbox/error.hpp"

namespace outbox {

std::chrono::milliseconds parse_duration(std::string_view text) {
  auto fail = [&](std::string_view why) {
    return InvalidArgument(fmt::format(
        "duration \"{}\": {}; write a number and a unit (ms, s, m, h, d), e.g. 500ms, 30s, 7d, "
        "1h30m",
        detail::printable(text, 100), why));
  };
  if (text.empty()) throw fail("empty");
  if (text == "0") return std::chrono::milliseconds(0);
  // Ten years. Every duration ends up added to a clock that counts nanoseconds in 64 bits (about
  // 292 years from its epoch): a longer one would overflow it and a wait would end at once.
  constexpr std::int64_t kMax = kMaxDurationDays * 24 * 3600 * 1000;
  std::int64_t total = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    std::int64_t number = 0;
    // from_chars takes "-0" as 0: refuse the sign itself (the fuzzer found "-0s" accepted).
    if (rest.front() == '-') throw fail("cannot be negative");
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), number);
    if (error == std::errc::result_out_of_range) throw fail("the number is too large");
    if (error != std::errc() || end == rest.data()) {
      throw fail(rest.front() == '-' ? "cannot be negative" : "expected a number");
    }
    if (number < 0) throw fail("cannot be negative");
    rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
    if (!rest.empty() && (rest.front() == '.' || rest.front() == ',')) {
      throw fail("whole numbers only (1h30m, not 1.5h)");
    }
    std::size_t unit_length = 0;
    while (unit_length < rest.size() &&
           std::isalpha(static_cast<unsigned char>(rest[unit_length]))) {
      ++unit_length;
    }
    const std::string_view unit = rest.substr(0, unit_length);
    rest.remove_prefix(unit_length);
    std::int64_t scale = 0;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60 * 1000;
    } else if (unit == "h") {
      scale = 3600 * 1000;
    } else if (unit == "d") {
      scale = 24 * 3600 * 1000;
    } else if (unit.empty()) {
      throw fail("a number needs a unit");
    } else {
      throw fail(fmt::format("unknown unit \"{}\"", unit));
    }
    if (number > (kMax - total) / scale) {
      throw fail(fmt::format("too large: at most {}d", kMaxDurationDays));
    }
    total += number * scale;
  }
  return std::chrono::milliseconds(total);
}

std::string format_duration(std::chrono::milliseconds value) {
  if (value.count() == 0) return "0";
  std::string text = value.count() < 0 ? "-" : "";
  // Unsigned: the magnitude of the most negative count still fits.
  std::uint64_t rest = value.count() < 0 ? 0 - static_cast<std::uint64_t>(value.count())
                                         : static_cast<std::uint64_t>(value.count());
  constexpr std::pair<std::uint64_t, const char*> kUnits[] = {{24ULL * 3600 * 1000, "d"},
                                                              {3600ULL * 1000, "h"},
                                                              {60ULL * 1000, "m"},
                                                              {1000, "s"},
                                                              {1, "ms"}};
  for (const auto& [scale, unit] : kUnits) {
    if (rest >= scale) {
      text += fmt::format("{}{}", rest / scale, unit);
      rest %= scale;
    }
  }
  return text;
}

std::string duration_range_problem(std::chrono::milliseconds value, std::chrono::milliseconds min,
                                   std::chrono::milliseconds max, std::string_view what,
                                   std::string_view why) {
  if (value >= min && value <= max) return {};
  return fmt::format("{} of {} is out of range: give {} to {}{}{}", what, format_duration(value),
                     format_duration(min), format_duration(max), why.empty() ? "" : "; ", why);
}

void check_duration_range(std::chrono::milliseconds value, std::chrono::milliseconds min,
                          std::chrono::milliseconds max, std::string_view what,
                          std::string_view why) {
  if (std::string problem = duration_range_problem(value, min, max, what, why); !problem.empty()) {
    throw InvalidArgument(problem);
  }
}

}  // namespace outbox
