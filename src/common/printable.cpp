#include "common/printable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace outbox::detail {
namespace {

// Length of the well-formed UTF-8 sequence at text[pos] (RFC 3629), 0 when there is none.
std::size_t sequence_length(std::string_view text, std::size_t pos, std::uint32_t& code_point) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char first = byte(0);
  if (first < 0x80) {
    code_point = first;
    return 1;
  }
  std::size_t length = 0;
  if (first >= 0xC2 && first <= 0xDF) {
    length = 2;
    code_point = first & 0x1F;
  } else if (first >= 0xE0 && first <= 0xEF) {
    length = 3;
    code_point = first & 0x0F;
  } else if (first >= 0xF0 && first <= 0xF4) {
    length = 4;
    code_point = first & 0x07;
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte: no overlong forms or surrogates
  if (first == 0xE0) low = 0xA0;
  if (first == 0xED) high = 0x9F;
  if (first == 0xF0) low = 0x90;
  if (first == 0xF4) high = 0x8F;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
    code_point = (code_point << 6) | (byte(i) & 0x3F);
  }
  return length;
}

bool is_hostile(std::uint32_t code_point) {
  return code_point < 0x20 || (code_point >= 0x7F && code_point <= 0x9F) ||
         (code_point >= 0x202A && code_point <= 0x202E) ||
         (code_point >= 0x2066 && code_point <= 0x2069) || code_point == 0x2028 ||
         code_point == 0x2029;
}

}  // namespace

std::optional<HostileCharacter> find_hostile_character(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    std::uint32_t code_point = 0;
    const std::size_t length = sequence_length(text, pos, code_point);
    if (length == 0) {
      return HostileCharacter{pos, fmt::format("a byte that is not UTF-8 (0x{:02x})",
                                               static_cast<unsigned char>(text[pos]))};
    }
    if (!is_hostile(code_point)) {
      pos += length;
      continue;
    }
    if (code_point == 0) return HostileCharacter{pos, "a NUL byte"};
    if (code_point <= 0x9F) {
      return HostileCharacter{pos, fmt::format("the control character U+{:04X}", code_point)};
    }
    if (code_point == 0x2028 || code_point == 0x2029) {
      return HostileCharacter{pos, fmt::format("the line break U+{:04X}", code_point)};
    }
    return HostileCharacter{pos, fmt::format("the bidirectional control U+{:04X}", code_point)};
  }
  return std::nullopt;
}

}  // namespace outbox::detail

namespace outbox {

using namespace detail;  // this file's helpers

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 8);
  std::size_t pos = 0;
  for (; pos < text.size() && pos < max_bytes;) {
    std::uint32_t code_point = 0;
    const std::size_t length = sequence_length(text, pos, code_point);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[pos]));
      ++pos;
      continue;
    }
    if (code_point == '\\') {
      out += "\\\\";
    } else if (code_point < 0x80 && is_hostile(code_point)) {
      out += fmt::format("\\x{:02x}", code_point);
    } else if (is_hostile(code_point)) {
      out += fmt::format("\\u{:04x}", code_point);
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
  }
  if (pos < text.size()) out += "...";
  return out;
}

}  // namespace outbox
