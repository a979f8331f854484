// scan_jsonb against PostgreSQL itself: the producer counts an event's size with the length it
// computes for `payload::text`, so it must equal octet_length(doc::jsonb::text) to the byte, and
// refuse exactly what jsonb refuses.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/json_text.hpp"
#include "common/jsonb_scan.hpp"
#include "pg/array_literal.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

// Hand-picked: every rule of jsonb's output, and the edges of numeric.
std::vector<std::string> handpicked_documents() {
  return {
      "{}",
      "[]",
      " [ ] ",
      "{ }",
      "0",
      "-0",
      "-0.0",
      "0.000",
      "1e2",
      "1E2",
      "1e+2",
      "1E-5",
      "123.4500e3",
      "-12.5e3",
      "0.5",
      "-0.05e1",
      "1e999",
      "-1e999",
      "1e131071",
      "-9.9e131070",
      "1e-16383",
      "0e-16383",
      "0.0e-16382",
      "0e1073741822",
      "0e-1",
      "10e-1",
      "100e-2",
      "1.0e1",
      "0.00001e5",
      "1e0",
      "1e-0",
      "1e00000000000000000000002",
      "123456789012345678901234567890",
      "-123456789012345678901234567890.123456789",
      "18446744073709551616",
      "-9223372036854775809",
      "1.7976931348623157e308",
      "5e-324",
      "4.9e-325",
      "9999.9999",
      "10000",
      "1000",
      "0.0001",
      "0.00012345e-3",
      "1234.5678e-8",
      "1e3",
      "1e4",
      "1e5",
      "12e3",
      "123e3",
      "1234e3",
      "true",
      "false",
      "null",
      R"("")",
      R"("plain")",
      R"("\u00e9")",
      R"("\u00E9t\u00e9")",
      R"("\ud83d\udce6")",
      R"("\uD83D\uDCE6 box")",
      R"("\/")",
      R"("a\/b\\c\"d")",
      R"("\b\f\n\r\t")",
      R"("\u0001\u001f\u007f\u0080\u009f")",
      R"("\u2028\u2029\u202e")",
      R"("\u0041\u0022\u005c")",
      "\"\x7f\xc2\x85 caf\xc3\xa9 \xe6\xb3\xa8 \xf0\x9f\x93\xa6\"",
      R"({"a":1,"b":[2,3]})",
      R"({"a":"long value","a":1})",
      R"({"o":{"x":1,"x":[1,2,3]},"o":{"y":2,"y":"z"}})",
      R"([{"k":1,"k":2},{"k":3}])",
      R"({"a":1,"\u0061":22})",
      R"({"\u00e9":1,"é":2})",
      R"({"":1,"":2})",
      R"({"b":1,"a":2,"bb":3,"aa":4})",
      R"([[],{},[[]],[{}],{"a":{}}])",
      "{\n  \"pretty\": [\n    1,\n    2\n  ],\n\t\"x\" :\r\n null\n}\n",
      R"({"nested":{"dup":{"k":"first","k":{"deep":[1e2,-0,0.000]}},"dup":[1E-5]}})",
      std::string(1000, '[') + std::string(1000, ']'),
  };
}

// Random documents from pieces that exercise the same rules, so combinations are covered too.
class DocumentMaker {
 public:
  explicit DocumentMaker(unsigned seed) : random_(seed) {}

  std::string document() {
    std::string out;
    value(out, 0);
    return out;
  }

 private:
  std::size_t pick(std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_);
  }

  void blank(std::string& out) {
    static const char* const kBlanks[] = {"", "", "", " ", "\n", "\t", "\r\n", "  "};
    out += kBlanks[pick(8)];
  }

  void value(std::string& out, int depth) {
    blank(out);
    const std::size_t kind = depth > 5 ? 3 + pick(4) : pick(7);
    switch (kind) {
      case 0:
      case 1: {  // object, often with repeated keys
        out += '{';
        const std::size_t members = pick(5);
        for (std::size_t i = 0; i < members; ++i) {
          if (i > 0) out += ',';
          blank(out);
          string(out, true);
          blank(out);
          out += ':';
          value(out, depth + 1);
        }
        blank(out);
        out += '}';
        break;
      }
      case 2: {
        out += '[';
        const std::size_t elements = pick(5);
        for (std::size_t i = 0; i < elements; ++i) {
          if (i > 0) out += ',';
          value(out, depth + 1);
        }
        blank(out);
        out += ']';
        break;
      }
      case 3:
      case 4:
        string(out, false);
        break;
      case 5:
        number(out);
        break;
      default:
        out += std::vector<std::string>{"true", "false", "null"}[pick(3)];
    }
    blank(out);
  }

  void string(std::string& out, bool key) {
    static const std::vector<std::string> kPieces = {"a",
                                                     "k",
                                                     "key",
                                                     "Z",
                                                     " ",
                                                     "\\u00e9",
                                                     "\\u00E9",
                                                     "\xc3\xa9",
                                                     "\\ud83d\\udce6",
                                                     "\xf0\x9f\x93\xa6",
                                                     "\\/",
                                                     "/",
                                                     "\\\\",
                                                     "\\\"",
                                                     "\\b",
                                                     "\\f",
                                                     "\\n",
                                                     "\\r",
                                                     "\\t",
                                                     "\\u0001",
                                                     "\\u001b",
                                                     "\\u001F",
                                                     "\\u007f",
                                                     "\x7f",
                                                     "\\u0085",
                                                     "\xc2\x85",
                                                     "\\u2028",
                                                     "\\u202e",
                                                     "\xe2\x80\xae",
                                                     "\\u0041",
                                                     "\\u0022",
                                                     "\\u005c",
                                                     "\xe6\xb3\xa8",
                                                     "'",
                                                     "{",
                                                     "]"};
    out += '"';
    // Keys come from a small set so objects repeat them.
    const std::size_t pieces = key ? pick(3) : pick(6);
    for (std::size_t i = 0; i < pieces; ++i) out += kPieces[key ? pick(6) : pick(kPieces.size())];
    out += '"';
  }

  void number(std::string& out) {
    if (pick(3) == 0) out += '-';
    const std::size_t integer = pick(4);
    if (integer == 0) {
      out += '0';
    } else {
      out += static_cast<char>('1' + pick(9));
      for (std::size_t i = pick(integer == 3 ? 25 : 4); i > 0; --i)
        out += static_cast<char>('0' + pick(10));
    }
    if (pick(2) == 0) {
      out += '.';
      const std::size_t digits = 1 + pick(8);
      for (std::size_t i = 0; i < digits; ++i)
        out += pick(3) == 0 ? '0' : static_cast<char>('0' + pick(10));
    }
    if (pick(2) == 0) {
      out += pick(2) == 0 ? 'e' : 'E';
      const std::size_t sign = pick(3);
      if (sign == 1) out += '+';
      if (sign == 2) out += '-';
      static const std::vector<std::string> kExponents = {"0",     "1",     "2",      "5",   "00",
                                                          "007",   "30",    "308",    "999", "4000",
                                                          "16383", "16380", "131060", "20",  "3"};
      out += kExponents[pick(kExponents.size())];
    }
  }

  std::mt19937 random_;
};

class JsonbScanTest : public ::testing::Test {
 protected:
  PGconn* conn() { return connection_.get(); }

  // octet_length(doc::jsonb::text) for each document, in one statement.
  std::vector<std::int64_t> postgres_lengths(const std::vector<std::string>& documents) {
    const std::string literal = pg::text_array(documents);
    const auto result =
        pg::exec(conn(),
                 "SELECT octet_length(d::jsonb::text) FROM unnest($1::text[]) WITH ORDINALITY "
                 "AS t(d, n) ORDER BY n",
                 {literal.c_str()});
    std::vector<std::int64_t> lengths;
    for (int row = 0; row < result.rows(); ++row) lengths.push_back(result.int64(row, 0));
    return lengths;
  }

  void expect_same_lengths(const std::vector<std::string>& documents) {
    const auto lengths = postgres_lengths(documents);
    ASSERT_EQ(lengths.size(), documents.size());
    for (std::size_t i = 0; i < documents.size(); ++i) {
      const detail::JsonbScan scan = detail::scan_jsonb(documents[i]);
      ASSERT_EQ(scan.problem, "") << documents[i].substr(0, 200);
      EXPECT_EQ(scan.text_bytes, static_cast<std::uint64_t>(lengths[i]))
          << "document: " << documents[i].substr(0, 300);
    }
  }

  pg::Connection connection_ = connect();
};

TEST_F(JsonbScanTest, LengthsMatchPostgresOverAVariedCorpus) {
  const auto documents = handpicked_documents();
  expect_same_lengths(documents);
}

TEST_F(JsonbScanTest, LengthsMatchPostgresOverRandomDocuments) {
  DocumentMaker maker(20261201);
  std::vector<std::string> documents;
  for (int i = 0; i < 3000; ++i) documents.push_back(maker.document());
  std::size_t accepted = 0;
  std::vector<std::string> valid;
  for (const std::string& document : documents) {
    // The maker can write numbers numeric refuses (1e131060 with 25 digits before the point);
    // those are compared in RefusesExactlyWhatPostgresRefuses.
    if (detail::scan_jsonb(document).problem.empty()) {
      valid.push_back(document);
      ++accepted;
    }
  }
  EXPECT_GT(accepted, 2500U);
  expect_same_lengths(valid);
}

// Each of these is refused by PostgreSQL (checked here) and by scan_jsonb; and the edges just
// inside are accepted by both.
TEST_F(JsonbScanTest, RefusesExactlyWhatPostgresRefuses) {
  const std::vector<std::string> refused = {"",
                                            " ",
                                            "{",
                                            "[1,]",
                                            "{\"a\":1,}",
                                            "-",
                                            "1.",
                                            ".5",
                                            "+1",
                                            "01",
                                            "1e",
                                            "1e+",
                                            "truex",
                                            "nul",
                                            "\"\\x\"",
                                            "\"\\u12\"",
                                            "\"\\ud800\"",
                                            "\"\\udc00\"",
                                            "\"\\ud800\\u0041\"",
                                            "\"\\ud800x\"",
                                            "\"\\u0000\"",
                                            "{\"\\u0000\":1}",
                                            "\"a\x01\"",
                                            "\"\xff\"",
                                            "\"\xc0\xaf\"",
                                            "\"\xed\xa0\x80\"",
                                            "\xef\xbb\xbf{}",
                                            "1e131072",
                                            "10e131071",
                                            "1e-16384",
                                            "0e-16384",
                                            "0.0e-16383",
                                            "0e1073741823",
                                            "1e1073741823",
                                            "1e-1073741823",
                                            "[1] [2]",
                                            "{a:1}",
                                            "'a'",
                                            "NaN",
                                            "Infinity",
                                            "[1e99999999999999999999]"};
  for (const std::string& document : refused) {
    EXPECT_NE(detail::scan_jsonb(document).problem, "") << document;
    EXPECT_THROW(pg::exec(conn(), "SELECT $1::jsonb", {document.c_str()}), DatabaseError)
        << "PostgreSQL accepted: " << document;
  }
  const std::vector<std::string> accepted = {"1e131071", "9.99e131070",       "1e-16383",
                                             "0e-16383", "0.0e-16382",        "0e1073741822",
                                             "1e999",    "\"\\ud83d\\udce6\""};
  expect_same_lengths(accepted);
}

}  // namespace
}  // namespace outbox::testing
