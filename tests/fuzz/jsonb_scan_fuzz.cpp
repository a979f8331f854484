// scan_jsonb and scan_header_object on arbitrary bytes. Besides "never crashes", two
// differentials with independent code:
//  - nlohmann::json: what it accepts, scan_jsonb accepts, except what jsonb refuses and nlohmann
//    does not (\u0000, a byte order mark, nesting over 1000, numbers outside numeric, a raw NUL
//    byte, where nlohmann stops reading); what
//    scan_jsonb accepts, nlohmann accepts, except numbers beyond a double. For documents without
//    fractions or exponents, the length of the text printed from nlohmann's tree the way jsonb
//    prints (", ", ": ", last of repeated keys, escape_json) equals scan_jsonb's figure.
//  - every number token: numeric_text_bytes equals the length of the string that numeric_out
//    would print, built digit by digit here.

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_text.hpp"
#include "common/jsonb_scan.hpp"

namespace {

using outbox::detail::JsonbScan;

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "property violated: %s\ninput: %.*s\n", what,
               static_cast<int>(std::min<std::size_t>(text.size(), 2000)), text.data());
  std::abort();
}

std::uint64_t escaped_length(const std::string& value) {
  std::uint64_t bytes = 2;
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t' || c == '"' || c == '\\') {
      bytes += 2;
    } else {
      bytes += u < 0x20 ? 6 : 1;
    }
  }
  return bytes;
}

// The length of jsonb's output for a tree without floats; false when it holds a float.
bool jsonb_length(const nlohmann::json& value, std::uint64_t& bytes) {
  switch (value.type()) {
    case nlohmann::json::value_t::object: {
      bytes += 2;
      std::size_t n = 0;
      for (const auto& [key, member] : value.items()) {
        if (n++ > 0) bytes += 2;
        bytes += escaped_length(key) + 2;
        if (!jsonb_length(member, bytes)) return false;
      }
      return true;
    }
    case nlohmann::json::value_t::array: {
      bytes += 2;
      std::size_t n = 0;
      for (const auto& element : value) {
        if (n++ > 0) bytes += 2;
        if (!jsonb_length(element, bytes)) return false;
      }
      return true;
    }
    case nlohmann::json::value_t::string:
      bytes += escaped_length(value.get_ref<const std::string&>());
      return true;
    case nlohmann::json::value_t::boolean:
      bytes += value.get<bool>() ? 4 : 5;
      return true;
    case nlohmann::json::value_t::null:
      bytes += 4;
      return true;
    case nlohmann::json::value_t::number_integer:
      bytes += std::to_string(value.get<std::int64_t>()).size();
      return true;
    case nlohmann::json::value_t::number_unsigned:
      bytes += std::to_string(value.get<std::uint64_t>()).size();
      return true;
    default:
      return false;
  }
}

// numeric_out's text for a JSON number token, built the slow way: all digits placed at their
// decimal positions, then printed. Only for exponents that keep it small; nullopt otherwise.
std::optional<std::string> numeric_out(std::string_view token) {
  std::size_t i = 0;
  const bool negative = token[0] == '-';
  if (negative) ++i;
  std::string digits;
  long point = 0;  // digits before the decimal point
  while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) {
    digits += token[i++];
    ++point;
  }
  long fraction = 0;
  if (i < token.size() && token[i] == '.') {
    ++i;
    while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) {
      digits += token[i++];
      ++fraction;
    }
  }
  long exponent = 0;
  if (i < token.size()) {
    const std::string e(token.substr(i + 1));
    if (e.size() > 7) return std::nullopt;
    exponent = std::stol(e);
  }
  if (exponent > 3000 || exponent < -3000) return std::nullopt;
  point += exponent;
  const long scale = std::max(0L, fraction - exponent);
  // Integer part: digits before `point`, zeros past the given digits, leading zeros dropped.
  std::string integer;
  for (long d = 0; d < point; ++d) {
    integer +=
        d < static_cast<long>(digits.size()) && d >= 0 ? digits[static_cast<std::size_t>(d)] : '0';
  }
  const auto first = integer.find_first_not_of('0');
  integer = first == std::string::npos ? "0" : integer.substr(first);
  std::string decimals;
  for (long d = 0; d < scale; ++d) {
    const long index = point + d;
    decimals += index >= 0 && index < static_cast<long>(digits.size())
                    ? digits[static_cast<std::size_t>(index)]
                    : '0';
  }
  const bool zero = digits.find_first_not_of('0') == std::string::npos;
  std::string out = (negative && !zero ? "-" : "") + integer;
  if (scale > 0) out += "." + decimals;
  return out;
}

void check_numbers(std::string_view text) {
  // Every maximal run that looks like a JSON number token, checked on its own.
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!(text[i] == '-' || std::isdigit(static_cast<unsigned char>(text[i])))) continue;
    std::size_t j = i;
    if (text[j] == '-') ++j;
    const std::size_t integer_start = j;
    if (j < text.size() && text[j] == '0') {
      ++j;
    } else {
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    }
    if (j == integer_start) continue;
    if (j + 1 < text.size() && text[j] == '.' &&
        std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
      ++j;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    }
    if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
      std::size_t k = j + 1;
      if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
      if (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) {
        while (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) ++k;
        j = k;
      }
    }
    const std::string_view token = text.substr(i, j - i);
    const std::int64_t bytes = outbox::detail::numeric_text_bytes(token);
    if (const auto reference = numeric_out(token)) {
      if (bytes >= 0 && static_cast<std::size_t>(bytes) != reference->size()) {
        fail("numeric_text_bytes differs from the digits numeric_out prints", token);
      }
    }
    i = j;
  }
}

int depth_of(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const JsonbScan scan = outbox::detail::scan_jsonb(text);
  const auto headers = outbox::detail::scan_header_object(text);
  if (headers.problem.empty()) {
    if (!scan.problem.empty()) fail("headers accepted where the document is refused", text);
    // Each header's two lengths take at most as much as its quotes, colon and separator.
    if (headers.message_bytes > headers.text_bytes) fail("headers larger than their text", text);
    if (headers.text_bytes != scan.text_bytes) fail("two lengths for one document", text);
  }
  check_numbers(text);

  nlohmann::json tree;
  std::string nlohmann_error;
  try {
    tree = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& error) {  // parse_error; out_of_range for overflow
    nlohmann_error = error.what();
  }
  if (!nlohmann_error.empty()) {
    if (scan.problem.empty() && nlohmann_error.find("number overflow") == std::string::npos) {
      fail("scan_jsonb accepts what nlohmann refuses", text);
    }
    return 0;
  }
  if (!scan.problem.empty()) {
    const std::string& p = scan.problem;
    // nlohmann stops at a NUL byte as if the text ended there (so did libpq: the reason for the
    // explicit refusal).
    const bool jsonb_only =
        p.starts_with("has a number outside") || p.starts_with("contains a NUL byte") ||
        p.starts_with("contains \\u0000") || p.starts_with("starts with a UTF-8 byte order mark") ||
        (p.starts_with("nests deeper") && depth_of(text) > 1000);
    if (!jsonb_only) fail("scan_jsonb refuses what nlohmann accepts", text);
    return 0;
  }
  std::uint64_t expected = 0;
  if (jsonb_length(tree, expected) && expected != scan.text_bytes) {
    fail("scan_jsonb's length differs from the tree printed as jsonb prints", text);
  }
  return 0;
}
