#pragma once
// Checks on JSON text supplied by callers.

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace outbox::detail
