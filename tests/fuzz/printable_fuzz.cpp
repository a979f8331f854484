// printable and find_hostile_character: the output never holds a character a terminal acts on,
// is valid UTF-8, and unescaping it gives back the input exactly (nothing is lost or invented).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"

namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// \\ -> \, \xNN -> byte, \uNNNN -> UTF-8; anything else is an error (nullopt).
std::optional<std::string> unescape(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (i + 1 >= text.size()) return std::nullopt;
    const char kind = text[++i];
    if (kind == '\\') {
      out += '\\';
    } else if (kind == 'x' && i + 2 < text.size() + 0 && hex(text[i + 1]) >= 0 &&
               hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else if (kind == 'u' && i + 4 < text.size() + 0) {
      std::uint32_t cp = 0;
      for (int k = 1; k <= 4; ++k) {
        if (hex(text[i + k]) < 0) return std::nullopt;
        cp = cp * 16 + static_cast<std::uint32_t>(hex(text[i + k]));
      }
      append_utf8(out, cp);
      i += 4;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string shown = outbox::detail::printable(text);
  if (outbox::detail::find_hostile_character(shown)) {
    outbox::fuzz::fail("printable() left a character a terminal acts on", text);
  }
  if (text.size() <= 4096) {
    if (unescape(shown) != std::string(text)) {
      outbox::fuzz::fail("printable() is not reversible", text);
    }
    const bool plain =
        !outbox::detail::find_hostile_character(text) && text.find('\\') == std::string_view::npos;
    if (plain && shown != text) outbox::fuzz::fail("printable() changed plain text", text);
  }
  return 0;
}
