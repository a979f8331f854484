#pragma once
// Checks on JSON text supplied by callers, and PostgreSQL array literals for batched statements.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::detail {

// Empty when `text` is one JSON value that PostgreSQL's jsonb can store; otherwise says what is
// wrong ("is not valid JSON: ...", or a string holding \u0000, which jsonb refuses). See
// scan_jsonb (common/jsonb_scan.hpp) for the stored text's length too.
std::string check_jsonb_document(std::string_view text);

struct HeaderScan {
  std::string problem;           // empty when the headers are acceptable
  std::uint64_t text_bytes = 0;  // octet_length(headers::jsonb::text)
  // What the headers add to a Kafka message: every name and value once (jsonb keeps the last of
  // a repeated name), each with its length, as librdkafka counts them (kafka_header_bytes).
  std::uint64_t message_bytes = 0;
};

// A JSON object of string values with non-empty names that outbox does not reserve.
HeaderScan scan_header_object(std::string_view text);

// scan_header_object(text).problem.
std::string check_header_object(std::string_view text);

// Appends `value` as one element of a PostgreSQL array literal ("..." with \ escapes).
void append_array_element(std::string& literal, std::string_view value);

// The bytes append_array_element adds for `value`.
std::size_t array_element_bytes(std::string_view value);

// {"a","b"} for text[], uuid[], jsonb[] ... parameters: one round trip for a whole batch.
std::string to_array_literal(const std::vector<std::string>& values);

// Builds an array literal element by element: add() quotes (text, JSON), add_plain() does not
// (uuids, numbers, booleans). text() closes it; nothing may be added after.
class ArrayLiteral {
 public:
  void add(std::string_view value) {
    separate();
    append_array_element(text_, value);
  }
  void add_plain(std::string_view value) {
    separate();
    text_ += value;
  }
  [[nodiscard]] const std::string& text() {
    if (!closed_) text_ += '}';
    closed_ = true;
    return text_;
  }

 private:
  void separate() {
    if (closed_) throw std::logic_error("ArrayLiteral: add after text()");
    if (elements_++ > 0) text_ += ',';
  }
  std::string text_ = "{";
  std::size_t elements_ = 0;
  bool closed_ = false;
};

}  // namespace outbox::detail
