#include "common/json_text.hpp"

#include <nlohmann/json.hpp>

#include "common/event_headers.hpp"

namespace outbox::detail {

namespace {

constexpr int kMaxDepth = 1000;  // jsonb's own limit is the server's stack depth; stay well below
constexpr long kMaxNumericWeight = 131072;  // decimal digits before the point in numeric
constexpr long kMaxNumericScale = 16383;    // decimal digits after the point in numeric

// One pass over the document with nlohmann's SAX interface, checking what nlohmann accepts but
// jsonb refuses: NUL in strings or keys, nesting deeper than the server's stack allows, and
// numbers outside numeric's range. `problem` is empty while all is well.
class JsonbChecker final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string problem;

  bool null() override { return true; }
  bool boolean(bool /*value*/) override { return true; }
  bool number_integer(number_integer_t /*value*/) override { return true; }
  bool number_unsigned(number_unsigned_t /*value*/) override { return true; }
  bool number_float(number_float_t /*value*/, const string_t& raw) override {
    return check_number(raw);
  }
  bool string(string_t& value) override { return check_string(value); }
  bool binary(binary_t& /*value*/) override { return true; }
  bool start_object(std::size_t /*size*/) override { return enter(); }
  bool key(string_t& value) override { return check_string(value); }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t /*size*/) override { return enter(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*error*/) override {
    if (problem.empty()) problem = "is not valid JSON";
    return false;
  }

 private:
  bool fail(std::string what) {
    problem = std::move(what);
    return false;
  }
  bool enter() { return ++depth_ <= kMaxDepth ? true : fail("nests deeper than 1000 levels"); }
  bool leave() {
    --depth_;
    return true;
  }
  bool check_string(const std::string& value) {
    return value.find('\0') == std::string::npos
               ? true
               : fail("contains \\u0000, which PostgreSQL jsonb cannot store");
  }
  // jsonb keeps numbers as numeric: at most 131072 digits before the point, 16383 after.
  bool check_number(const std::string& raw) {
    long integer_digits = 0, fraction_digits = 0, exponent = 0;
    bool leading = true, in_fraction = false;
    std::size_t i = raw.starts_with('-') ? 1 : 0;
    for (; i < raw.size() && raw[i] != 'e' && raw[i] != 'E'; ++i) {
      if (raw[i] == '.') {
        in_fraction = true;
      } else if (in_fraction) {
        ++fraction_digits;
      } else if (!(leading && raw[i] == '0')) {
        leading = false;
        ++integer_digits;
      }
    }
    if (i < raw.size()) {
      const std::string digits = raw.substr(i + 1);
      if (digits.size() > 9) return fail("has a number outside PostgreSQL's numeric range");
      exponent = std::stol(digits);
    }
    if (integer_digits + exponent > kMaxNumericWeight ||
        fraction_digits - exponent > kMaxNumericScale) {
      return fail("has a number outside PostgreSQL's numeric range (" + raw.substr(0, 40) + ")");
    }
    return true;
  }
  int depth_ = 0;
};

}  // namespace

namespace {
// libpq sends a text parameter up to its first NUL byte and the JSON parser stops there too, so
// a document with a raw NUL would be stored cut short without an error.
constexpr const char* kRawNul =
    "contains a NUL byte; JSON text cannot (write it as \\u0000 inside a string, which jsonb "
    "refuses too)";
}  // namespace

std::string check_jsonb_document(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return kRawNul;
  if (text.starts_with("\xEF\xBB\xBF")) {
    return "starts with a UTF-8 byte order mark, which PostgreSQL jsonb refuses; remove it";
  }
  JsonbChecker checker;
  const bool ok = nlohmann::json::sax_parse(text, &checker, nlohmann::json::input_format_t::json,
                                            /*strict=*/true);
  if (!ok && checker.problem.empty()) return "is not valid JSON";
  return checker.problem;
}

std::string check_header_object(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return kRawNul;
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return "is not valid JSON";
  if (!parsed.is_object()) return "must be a JSON object";

  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_string()) return "value of \"" + key + "\" must be a string";
    if (key.empty()) return "has an empty key";
    if (is_reserved_header(key)) {
      return "uses the reserved name \"" + key +
             "\": outbox sets it from the event itself; choose another header name";
    }
  }
  return check_jsonb_document(text);
}

void append_array_element(std::string& literal, std::string_view value) {
  literal.push_back('"');
  for (const char c : value) {
    if (c == '"' || c == '\\') literal.push_back('\\');
    literal.push_back(c);
  }
  literal.push_back('"');
}

std::string to_array_literal(const std::vector<std::string>& values) {
  ArrayLiteral literal;
  for (const std::string& value : values) literal.add(value);
  return literal.text();
}

}  // namespace outbox::detail
