#include "outbox/byte_size.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>

#include "common/ascii_case.hpp"
#include "outbox/error.hpp"

namespace outbox {

std::uint64_t parse_byte_size(std::string_view text) {
  auto fail = [&](std::string_view why) {
    return InvalidArgument(fmt::format(
        "byte size \"{}\": {}; write a whole number of bytes or of KiB, MiB, GiB, e.g. 64MiB", text,
        why));
  };
  if (text.empty()) throw fail("empty");
  if (text.front() == '-') throw fail("cannot be negative");
  std::uint64_t number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error == std::errc::result_out_of_range) throw fail("too large");
  if (error != std::errc() || end == text.data()) throw fail("expected a number");
  std::string unit(end, text.data() + text.size());
  if (!unit.empty() && (unit.front() == '.' || unit.front() == ',')) {
    throw fail("whole numbers only (1536KiB, not 1.5MiB)");
  }
  unit = detail::ascii_lower(unit);
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "kib") {
    shift = 10;
  } else if (unit == "mib") {
    shift = 20;
  } else if (unit == "gib") {
    shift = 30;
  } else if (unit == "kb" || unit == "mb" || unit == "gb") {
    throw fail(fmt::format("\"{}\" is ambiguous (1000 or 1024?)", std::string(end, text.end())));
  } else {
    throw fail(fmt::format("unknown unit \"{}\"", std::string(end, text.end())));
  }
  if (number > (std::numeric_limits<std::uint64_t>::max() >> shift)) throw fail("too large");
  return number << shift;
}

}  // namespace outbox
