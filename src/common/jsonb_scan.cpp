#include "common/jsonb_scan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/plain_words.hpp"

namespace outbox::detail {
namespace {

constexpr std::size_t kMaxDepth = 1000;  // jsonb's own limit is the server's stack depth

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// What escape_json prints for one byte of a stored string.
std::uint64_t escaped_bytes(unsigned char c) {
  switch (c) {
    case '\b':
    case '\f':
    case '\n':
    case '\r':
    case '\t':
    case '"':
    case '\\':
      return 2;
    default:
      return c < 0x20 ? 6 : 1;  // \u001b
  }
}

// Length of the well-formed UTF-8 sequence at text[pos] (the rules of pg_utf8_islegal, which are
// RFC 3629's: no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_sequence_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char first = byte(0);
  std::size_t length = 0;
  if (first < 0x80) return 1;
  if (first >= 0xC2 && first <= 0xDF) {
    length = 2;
  } else if (first >= 0xE0 && first <= 0xEF) {
    length = 3;
  } else if (first >= 0xF0 && first <= 0xF4) {
    length = 4;
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (first == 0xE0) low = 0xA0;
  if (first == 0xED) high = 0x9F;
  if (first == 0xF0) low = 0x90;
  if (first == 0xF4) high = 0x8F;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

std::size_t utf8_length_of(std::uint32_t code_point) {
  if (code_point < 0x80) return 1;
  if (code_point < 0x800) return 2;
  if (code_point < 0x10000) return 3;
  return 4;
}

// One open array or object.
struct Frame {
  bool is_object = false;
  std::uint64_t elements = 0;     // arrays: elements so far
  std::uint64_t element_sum = 0;  // arrays: their printed bytes
  // objects: each key's printed entry (`"key": value`); a repeated key replaces its entry
  std::map<std::string, std::uint64_t> entries;
  std::string key;  // objects: the key whose value is being read
  std::uint64_t key_bytes = 0;
};

class Scanner {
 public:
  Scanner(std::string_view text, bool collect_members)
      : text_(text), collect_members_(collect_members) {}

  JsonbScan run() {
    JsonbScan result;
    if (!check_bytes() || !parse()) {
      result.problem = std::move(problem_);
      return result;
    }
    result.text_bytes = total_;
    result.is_object = text_[text_.find_first_not_of(" \t\n\r")] == '{';
    result.members = std::move(members_);
    return result;
  }

 private:
  bool fail(std::string what) {
    problem_ = std::move(what);
    return false;
  }
  bool syntax(std::string_view expected) {
    if (pos_ >= text_.size()) {
      return fail(fmt::format("is not valid JSON: it ends where {} should follow (at byte {})",
                              expected, pos_));
    }
    return fail(fmt::format("is not valid JSON: expected {} at byte {}", expected, pos_));
  }

  // What the server checks before any parsing: the bytes are UTF-8 (pg_verify_mbstr) and, here,
  // no NUL (libpq sends a text parameter up to its first NUL, so the rest would vanish silently).
  bool check_bytes() {
    if (text_.starts_with("\xEF\xBB\xBF")) {
      return fail("starts with a UTF-8 byte order mark, which PostgreSQL jsonb refuses; remove it");
    }
    for (std::size_t pos = 0; pos < text_.size();) {
      pos = skip_ascii_words(text_, pos);
      if (pos == text_.size()) break;
      const char c = text_[pos];
      if (c == '\0') {
        return fail(fmt::format(
            "contains a NUL byte (at byte {}); JSON text cannot (write it as \\u0000 inside a "
            "string, which jsonb refuses too)",
            pos));
      }
      const std::size_t length = utf8_sequence_length(text_, pos);
      if (length == 0) {
        return fail(fmt::format("is not valid UTF-8 (at byte {}); send UTF-8 text", pos));
      }
      pos += length;
    }
    return true;
  }

  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }
  [[nodiscard]] bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  bool parse() {
    bool in_value = true;  // expecting a value (else: what follows one)
    for (;;) {
      skip_space();
      if (in_value) {
        if (at('{') || at('[')) {
          if (!open_container(in_value)) return false;
          continue;
        }
        if (!read_scalar()) return false;
        in_value = false;
        continue;
      }
      // A value is complete (value_): attach it to its container, then see what follows.
      if (stack_.empty()) {
        if (pos_ != text_.size()) return syntax("the end of the document");
        total_ = value_.bytes;
        return true;
      }
      attach_value();
      if (at(',')) {
        ++pos_;
        if (stack_.back().is_object) {
          skip_space();
          if (!read_key()) return false;
        }
        in_value = true;
        continue;
      }
      if (!close_container()) return false;
    }
  }

  // At '{' or '[': a new frame, and the first key of an object. An empty container is a complete
  // value at once (`in_value` false).
  bool open_container(bool& in_value) {
    if (stack_.size() >= kMaxDepth) return fail("nests deeper than 1000 levels");
    Frame& frame = stack_.emplace_back();
    frame.is_object = at('{');
    ++pos_;
    skip_space();
    if (at(frame.is_object ? '}' : ']')) {
      ++pos_;
      stack_.pop_back();
      value_ = {2, false, 0};
      in_value = false;
    } else if (frame.is_object && !read_key()) {
      return false;
    }
    return true;
  }

  // The complete value_ into the open container's frame.
  void attach_value() {
    Frame& frame = stack_.back();
    if (frame.is_object) {
      if (collect_members_ && stack_.size() == 1) {
        members_[frame.key] = JsonbMember{value_.is_string, value_.decoded_bytes};
      }
      frame.entries[std::move(frame.key)] = frame.key_bytes + 2 + value_.bytes;  // "k": v
      frame.key.clear();
    } else {
      ++frame.elements;
      frame.element_sum += value_.bytes;
    }
  }

  // At what must end the open container: closes it, its output size becomes value_.
  bool close_container() {
    Frame& frame = stack_.back();
    if (!at(frame.is_object ? '}' : ']')) {
      return syntax(frame.is_object ? "',' or '}'" : "',' or ']'");
    }
    ++pos_;
    std::uint64_t bytes = 2;  // the brackets
    std::uint64_t count = 0;
    if (frame.is_object) {
      for (const auto& [key, entry] : frame.entries) bytes += entry;
      count = frame.entries.size();
    } else {
      bytes += frame.element_sum;
      count = frame.elements;
    }
    if (count > 1) bytes += 2 * (count - 1);  // ", "
    stack_.pop_back();
    value_ = {bytes, false, 0};
    return true;
  }

  // `"key"` and the colon after it, into the open object's frame.
  bool read_key() {
    if (!at('"')) return syntax("a string (an object key) or '}'");
    Frame& frame = stack_.back();
    frame.key.clear();
    std::uint64_t decoded = 0;
    if (!read_string(frame.key_bytes, decoded, &frame.key)) return false;
    skip_space();
    if (!at(':')) return syntax("':'");
    ++pos_;
    return true;
  }

  bool read_scalar() {
    if (at('"')) {
      value_ = {0, true, 0};
      return read_string(value_.bytes, value_.decoded_bytes, nullptr);
    }
    value_ = {0, false, 0};
    for (const std::string_view word : {"true", "false", "null"}) {
      if (at(word[0]) && text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        value_.bytes = word.size();
        return true;
      }
    }
    if (at('-') || (pos_ < text_.size() && is_digit(text_[pos_]))) return read_number();
    return syntax("a value (object, array, string, number, true, false or null)");
  }

  // A run of a string's bytes printed as they are (every byte but '"', '\\' and controls; those
  // of a multi-byte character are all >= 0x80), taken at once.
  void take_plain_run(std::uint64_t& printed, std::uint64_t& decoded, std::string* key) {
    const std::size_t from = pos_;
    pos_ = skip_json_string_words(text_, pos_);
    while (pos_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"' || c == '\\' || c < 0x20) break;
      ++pos_;
    }
    printed += pos_ - from;
    decoded += pos_ - from;
    if (key != nullptr) key->append(text_.data() + from, pos_ - from);
  }

  // At the opening quote. `printed`: the string as escape_json prints it, quotes included;
  // `decoded`: its stored UTF-8 bytes; `key` receives them when not null.
  bool read_string(std::uint64_t& printed, std::uint64_t& decoded, std::string* key) {
    const std::size_t start = pos_++;
    printed = 2;
    decoded = 0;
    auto add = [&](unsigned char c) {
      printed += escaped_bytes(c);
      ++decoded;
      if (key != nullptr) key->push_back(static_cast<char>(c));
    };
    for (;;) {
      take_plain_run(printed, decoded, key);
      if (pos_ >= text_.size()) {
        return fail(fmt::format("is not valid JSON: the string at byte {} is not closed", start));
      }
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) {
        return fail(fmt::format(
            "is not valid JSON: a string holds the raw control character 0x{:02x} at byte {}; "
            "escape it (\\n, \\t, \\u001b ...)",
            c, pos_));
      }
      const std::size_t escape_at = pos_++;
      const char e = pos_ < text_.size() ? text_[pos_++] : '\0';
      if (e != 'u') {
        const int byte = simple_escape(e);
        if (byte < 0) {
          return fail(fmt::format("is not valid JSON: invalid escape at byte {}", escape_at));
        }
        add(static_cast<unsigned char>(byte));
        continue;
      }
      std::uint32_t code_point = 0;
      if (!read_unicode_escape(escape_at, code_point)) return false;
      if (code_point < 0x80) {
        add(static_cast<unsigned char>(code_point));
      } else if (key == nullptr) {
        const std::size_t length = utf8_length_of(code_point);
        printed += length;
        decoded += length;
      } else {
        append_utf8(code_point, printed, decoded, *key);
      }
    }
  }

  // The byte a one-letter escape (after the backslash) stands for; -1 when it is none.
  static int simple_escape(char e) {
    switch (e) {
      case '"':
      case '\\':
      case '/':
        return e;
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      default:
        return -1;
    }
  }

  // After `\u` (the backslash at `escape_at`): four hex digits, and a second `\uXXXX` when they
  // are a high surrogate. The code point must be one jsonb stores (not a lone surrogate, not 0).
  bool read_unicode_escape(std::size_t escape_at, std::uint32_t& code_point) {
    if (!read_hex4(code_point)) {
      return fail(
          fmt::format("is not valid JSON: \\u at byte {} needs four hex digits", escape_at));
    }
    if (code_point >= 0xDC00 && code_point <= 0xDFFF) {
      return fail(fmt::format(
          "is not valid JSON: the low surrogate at byte {} must follow a high surrogate",
          escape_at));
    }
    if (code_point >= 0xD800 && code_point <= 0xDBFF) {
      std::uint32_t low = 0;
      if (text_.substr(pos_, 2) != "\\u" || (pos_ += 2, !read_hex4(low)) || low < 0xDC00 ||
          low > 0xDFFF) {
        return fail(fmt::format(
            "is not valid JSON: the high surrogate at byte {} must be followed by a low one "
            "(\\uDC00 to \\uDFFF)",
            escape_at));
      }
      code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
    }
    if (code_point == 0) {
      return fail(fmt::format("contains \\u0000, which PostgreSQL jsonb cannot store (at byte {})",
                              escape_at));
    }
    return true;
  }

  static void append_utf8(std::uint32_t code_point, std::uint64_t& printed, std::uint64_t& decoded,
                          std::string& out) {
    const std::size_t length = utf8_length_of(code_point);
    char bytes[4];
    if (length == 2) {
      bytes[0] = static_cast<char>(0xC0 | (code_point >> 6));
    } else if (length == 3) {
      bytes[0] = static_cast<char>(0xE0 | (code_point >> 12));
      bytes[1] = static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    } else {
      bytes[0] = static_cast<char>(0xF0 | (code_point >> 18));
      bytes[1] = static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
      bytes[2] = static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    }
    bytes[length - 1] = static_cast<char>(0x80 | (code_point & 0x3F));
    out.append(bytes, length);
    printed += length;
    decoded += length;
  }

  bool read_hex4(std::uint32_t& value) {
    if (pos_ + 4 > text_.size()) return false;
    value = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      std::uint32_t digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
      value = value * 16 + digit;
    }
    pos_ += 4;
    return true;
  }

  // JSON's number grammar, as PostgreSQL's json lexer applies it.
  bool read_number() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
      return pos_ - from;
    };
    if (at('-')) ++pos_;
    if (at('0')) {
      ++pos_;
    } else if (digits() == 0) {
      return syntax("a digit");
    }
    if (at('.')) {
      ++pos_;
      if (digits() == 0) return syntax("a digit after the decimal point");
    }
    if (at('e') || at('E')) {
      ++pos_;
      if (at('+') || at('-')) ++pos_;
      if (digits() == 0) return syntax("a digit in the exponent");
    }
    const std::string_view number = text_.substr(start, pos_ - start);
    const std::int64_t bytes = numeric_text_bytes(number);
    if (bytes < 0) {
      return fail(fmt::format(
          "has a number outside PostgreSQL's numeric range at byte {} ({}{}): at most 131072 "
          "digits before the decimal point and 16383 after",
          start, number.substr(0, 40), number.size() > 40 ? "..." : ""));
    }
    value_ = {static_cast<std::uint64_t>(bytes), false, 0};
    return true;
  }

  struct Value {
    std::uint64_t bytes = 0;  // as jsonb prints it
    bool is_string = false;
    std::uint64_t decoded_bytes = 0;  // strings: stored bytes
  };

  std::string_view text_;
  bool collect_members_;
  std::size_t pos_ = 0;
  std::vector<Frame> stack_;
  Value value_;
  std::uint64_t total_ = 0;
  std::map<std::string, JsonbMember> members_;
  std::string problem_;
};

}  // namespace

JsonbScan scan_jsonb(std::string_view text, bool collect_members) {
  return Scanner(text, collect_members).run();
}

}  // namespace outbox::detail
