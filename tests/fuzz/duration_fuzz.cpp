// parse_duration (flags such as --retention 7d, --every 10m): any text gives a duration or an
// InvalidArgument with a printable message, never another exception; what it accepts is a sum
// of number-unit pairs that a plain reference parser computes alike; and format_duration of what
// it accepted reads back as the same duration.

#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"

namespace {

// Digits then one of ms|s|m|h|d, repeated; "0" alone. nullopt for anything else or overflow.
std::optional<std::int64_t> reference(std::string_view text) {
  if (text == "0") return 0;
  if (text.empty()) return std::nullopt;
  constexpr std::int64_t kMax = outbox::kMaxDurationDays * 86'400'000;  // parse_duration's limit
  std::int64_t total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::int64_t number = 0;
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (number > (INT64_MAX - 9) / 10) return std::nullopt;
      number = number * 10 + (text[i++] - '0');
    }
    if (i == start) return std::nullopt;
    std::int64_t scale = 0;
    if (text.substr(i, 2) == "ms" &&
        (i + 2 == text.size() || !std::isalpha(static_cast<unsigned char>(text[i + 2])))) {
      scale = 1;
      i += 2;
    } else if (i < text.size() &&
               (i + 1 == text.size() || !std::isalpha(static_cast<unsigned char>(text[i + 1])))) {
      switch (text[i]) {
        case 's':
          scale = 1000;
          break;
        case 'm':
          scale = 60'000;
          break;
        case 'h':
          scale = 3'600'000;
          break;
        case 'd':
          scale = 86'400'000;
          break;
        default:
          return std::nullopt;
      }
      ++i;
    } else {
      return std::nullopt;
    }
    if (number > (kMax - total) / scale) return std::nullopt;
    total += number * scale;
  }
  return total;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<std::int64_t> parsed;
  try {
    parsed = outbox::parse_duration(text).count();
  } catch (const outbox::InvalidArgument& error) {
    outbox::fuzz::expect_printable_message(error.what(), text);
  }
  if (parsed && *parsed < 0) outbox::fuzz::fail("a negative duration", text);
  if (parsed != reference(text)) outbox::fuzz::fail("differs from the reference parser", text);
  // What an error message prints (format_duration) reads back as the same duration.
  if (parsed &&
      outbox::parse_duration(outbox::format_duration(std::chrono::milliseconds(*parsed))).count() !=
          *parsed) {
    outbox::fuzz::fail("format_duration does not read back", text);
  }
  return 0;
}
