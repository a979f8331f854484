#pragma once
// JSON text as PostgreSQL's jsonb reads it: whether jsonb can store it, and how many bytes its
// text output (`payload::text`, what the relay reads and a sink sends) will have.
//
// jsonb does not keep the caller's text. It prints `{"a": 1, "b": [2, 3]}` (a space after every
// comma and colon, no other whitespace), keeps only the last of duplicate keys, stores strings
// decoded and escapes them again (\u00e9 comes back as the two bytes of é, "\/" as "/", control
// characters as \n or \u001b), and prints numbers as numeric_out does (1e999 becomes a
// 1000-digit number, -0 becomes 0, 0.000 stays 0.000). So the stored text can be far longer or
// shorter than the caller's; the scan computes its length exactly, in one pass, without building
// it. Verified against PostgreSQL 15 by JsonbScanTest (tests/integration/producer_pgtest.cpp).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace outbox::detail {

// A member of the top-level object, after duplicates were folded (the last one counts).
struct JsonbMember {
  bool is_string = false;
  std::uint64_t value_bytes = 0;  // the decoded string's UTF-8 bytes (strings only)
};

struct JsonbScan {
  // Empty when jsonb stores the document; otherwise what is wrong and at which byte.
  std::string problem;
  // octet_length(text::jsonb::text) when `problem` is empty.
  std::uint64_t text_bytes = 0;
  // The document is an object (when `problem` is empty).
  bool is_object = false;
  // Keys of a top-level object (decoded) and their last value; filled only when asked for.
  std::map<std::string, JsonbMember> members;
};

// Never throws for any input (fuzzed: tests/fuzz/jsonb_scan_fuzz.cpp). Linear in the input,
// plus a map lookup per object key. Refuses what jsonb refuses (not JSON, invalid UTF-8, a NUL
// byte or \u0000, unpaired surrogates, numbers outside numeric's range) and, to stay clear of
// the server's stack depth limit, nesting deeper than 1000 levels.
JsonbScan scan_jsonb(std::string_view text, bool collect_members = false);

// The length numeric_out gives the JSON number `number` (already known to be valid JSON number
// syntax), or -1 when numeric cannot hold it. Exposed for tests.
std::int64_t numeric_text_bytes(std::string_view number);

}  // namespace outbox::detail
