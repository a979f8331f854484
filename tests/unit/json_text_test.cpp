// JSON checks on caller-supplied text.

#include "common/json_text.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/jsonb_scan.hpp"

namespace outbox::detail {
namespace {

// --- check_jsonb_document: plain JSON validity ---

bool is_json(std::string_view text) { return check_jsonb_document(text).empty(); }

TEST(IsJson, AcceptsObjectsAndArrays) {
  EXPECT_TRUE(is_json("{}"));
  EXPECT_TRUE(is_json(R"({"order_id": 4711, "lines": [{"sku": "a", "qty": 2}]})"));
  EXPECT_TRUE(is_json("[]"));
  EXPECT_TRUE(is_json(R"([1, "two", null, true, {"x": []}])"));
}

TEST(IsJson, AcceptsScalars) {
  EXPECT_TRUE(is_json("0"));
  EXPECT_TRUE(is_json("-12.5e3"));
  EXPECT_TRUE(is_json(R"("text")"));
  EXPECT_TRUE(is_json("true"));
  EXPECT_TRUE(is_json("false"));
  EXPECT_TRUE(is_json("null"));
}

TEST(IsJson, AcceptsSurroundingWhitespace) {
  EXPECT_TRUE(is_json("  {\"a\": 1}\n"));
  EXPECT_TRUE(is_json("\t[ ]\r\n"));
}

TEST(IsJson, RejectsInvalidJson) {
  EXPECT_FALSE(is_json("{"));
  EXPECT_FALSE(is_json("{a: 1}"));
  EXPECT_FALSE(is_json("{'a': 1}"));
  EXPECT_FALSE(is_json(R"({"a": 1,})"));
  EXPECT_FALSE(is_json("[1, 2"));
  EXPECT_FALSE(is_json("undefined"));
  EXPECT_FALSE(is_json("NaN"));
  EXPECT_FALSE(is_json("01"));
  EXPECT_FALSE(is_json(R"("unterminated)"));
  EXPECT_FALSE(is_json("\"bad escape \\x\""));
}

TEST(IsJson, RejectsTrailingGarbage) {
  EXPECT_FALSE(is_json("{}x"));
  EXPECT_FALSE(is_json("{} {}"));
  EXPECT_FALSE(is_json("[1] ]"));
  EXPECT_FALSE(is_json("1 2"));
  EXPECT_FALSE(is_json(R"({"a": 1}; DROP TABLE outbox_events)"));
}

TEST(IsJson, RejectsEmptyAndBlank) {
  EXPECT_FALSE(is_json(""));
  EXPECT_FALSE(is_json("   "));
  EXPECT_FALSE(is_json("\n"));
}

// --- check_header_object ---

TEST(CheckHeaderObject, EmptyResultForObjectsOfStrings) {
  EXPECT_EQ(check_header_object("{}"), "");
  EXPECT_EQ(check_header_object(R"({"traceparent": "00-abc-def-01", "tenant": ""})"), "");
  EXPECT_EQ(check_header_object(R"( { "k" : "v" } )"), "");
}

TEST(CheckHeaderObject, SaysWhenNotAnObject) {
  EXPECT_EQ(check_header_object("[]"), "must be a JSON object");
  EXPECT_EQ(check_header_object(R"(["a", "b"])"), "must be a JSON object");
  EXPECT_EQ(check_header_object(R"("text")"), "must be a JSON object");
  EXPECT_EQ(check_header_object("1"), "must be a JSON object");
  EXPECT_EQ(check_header_object("null"), "must be a JSON object");
}

TEST(CheckHeaderObject, NamesTheKeyWhoseValueIsNotAString) {
  EXPECT_EQ(check_header_object(R"({"retries": 3})"), "value of \"retries\" must be a string");
  EXPECT_EQ(check_header_object(R"({"ok": "yes", "nested": {"a": "b"}})"),
            "value of \"nested\" must be a string");
  EXPECT_EQ(check_header_object(R"({"list": ["a"]})"), "value of \"list\" must be a string");
  EXPECT_EQ(check_header_object(R"({"flag": true})"), "value of \"flag\" must be a string");
  EXPECT_EQ(check_header_object(R"({"gone": null})"), "value of \"gone\" must be a string");
}

TEST(CheckHeaderObject, RejectsAnEmptyKey) {
  EXPECT_EQ(check_header_object(R"({"": "v"})"), "has an empty key");
}

TEST(CheckHeaderObject, SaysWhenNotValidJsonAndWhere) {
  EXPECT_TRUE(check_header_object("").starts_with("is not valid JSON: it ends where a value"));
  EXPECT_TRUE(check_header_object("{").starts_with("is not valid JSON: it ends where a string"));
  EXPECT_EQ(check_header_object("{\"a\": \"b\"} trailing"),
            "is not valid JSON: expected the end of the document at byte 11");
  EXPECT_EQ(check_header_object("{a: b}"),
            "is not valid JSON: expected a string (an object key) or '}' at byte 1");
}

// jsonb keeps the last of repeated names, and so does the sink: the earlier values never count.
TEST(ScanHeaderObject, CountsNamesAndValuesOnceTheLastRepeatWins) {
  const HeaderScan scan = scan_header_object(R"({"tenant": "a-long-value", "tenant": "b"})");
  EXPECT_EQ(scan.problem, "");
  EXPECT_EQ(scan.message_bytes, 9U);  // tenant, b and their one-byte lengths
  EXPECT_EQ(scan.text_bytes, 15U);    // {"tenant": "b"}
  EXPECT_EQ(check_header_object(R"({"n": 1, "n": "one"})"), "");
  EXPECT_EQ(check_header_object(R"({"n": "one", "n": 1})"), "value of \"n\" must be a string");
  // Escapes count as the bytes they stand for: é is two.
  EXPECT_EQ(scan_header_object(R"({"k": "\u00e9"})").message_bytes, 5U);
  // A length of 64 or more takes two bytes as a zig-zag varint.
  EXPECT_EQ(scan_header_object("{\"" + std::string(64, 'n') + "\": \"\"}").message_bytes, 67U);
}

}  // namespace
}  // namespace outbox::detail

namespace outbox::detail {
namespace {

// --- check_jsonb_document: what JSON allows but jsonb refuses ---

TEST(CheckJsonbDocument, RefusesAByteOrderMark) {
  EXPECT_NE(check_jsonb_document("\xEF\xBB\xBF{}").find("byte order mark"), std::string::npos);
}

TEST(CheckJsonbDocument, RefusesNestingDeeperThanAThousandLevels) {
  const std::string ok = std::string(1000, '[') + std::string(1000, ']');
  const std::string deep = std::string(1001, '[') + std::string(1001, ']');
  EXPECT_EQ(check_jsonb_document(ok), "");
  EXPECT_NE(check_jsonb_document(deep).find("deeper than 1000"), std::string::npos);
}

TEST(CheckJsonbDocument, RefusesNumbersOutsideNumericRange) {
  EXPECT_EQ(check_jsonb_document("[1e-16000, 1.5e300, 123.456, 1e-300]"), "");
  EXPECT_NE(check_jsonb_document("1e-200000").find("numeric range"), std::string::npos);
  EXPECT_NE(check_jsonb_document("0.1e-16383").find("numeric range"), std::string::npos);
  // Beyond a double's range the parser itself refuses the number.
  EXPECT_NE(check_jsonb_document(R"({"x": 1e9999999999})"), "");
}

TEST(CheckJsonbDocument, TellsAnEscapedNulFromAnEscapedBackslash) {
  EXPECT_NE(check_jsonb_document(R"({"a": "x\u0000"})").find("\\u0000"), std::string::npos);
  EXPECT_NE(check_jsonb_document(R"({"x\u0000": 1})").find("\\u0000"), std::string::npos);
  EXPECT_EQ(check_jsonb_document(R"({"a": "C:\\u0000"})"), "");
}

TEST(CheckHeaderObject, RefusesOutboxsOwnHeaderNames) {
  for (const char* name :
       {"event_id", "event_type", "aggregate_type", "aggregate_sequence", "schema_version"}) {
    const std::string headers = std::string(R"({")") + name + R"(": "x"})";
    EXPECT_NE(check_header_object(headers).find("reserved name"), std::string::npos) << name;
  }
  EXPECT_EQ(check_header_object(R"({"trace_id": "abc", "Event_Id": "x"})"), "");
}

}  // namespace
}  // namespace outbox::detail

namespace outbox::detail {
namespace {

// --- scan_jsonb: the length of jsonb's text output (checked against PostgreSQL itself by the
// integration test JsonbScanTest.LengthsMatchPostgresOverAVariedCorpus) ---

std::uint64_t printed(std::string_view text) {
  const JsonbScan scan = scan_jsonb(text);
  EXPECT_EQ(scan.problem, "") << text;
  return scan.text_bytes;
}

TEST(ScanJsonb, PrintsASpaceAfterEveryCommaAndColonAndNoOtherBlank) {
  EXPECT_EQ(printed(R"({"a":1,"b":[2,3]})"), std::string(R"({"a": 1, "b": [2, 3]})").size());
  EXPECT_EQ(printed(" [ ] "), 2U);
  EXPECT_EQ(printed("{ }"), 2U);
  EXPECT_EQ(printed("[[],{},[[]]]"), std::string("[[], {}, [[]]]").size());
  EXPECT_EQ(printed(" \"x\" "), 3U);
  EXPECT_EQ(printed("true"), 4U);
  EXPECT_EQ(printed("false"), 5U);
  EXPECT_EQ(printed("null"), 4U);
}

TEST(ScanJsonb, KeepsTheLastOfRepeatedKeysAtEveryLevel) {
  EXPECT_EQ(printed(R"({"a":"long value","a":1})"), std::string(R"({"a": 1})").size());
  EXPECT_EQ(printed(R"({"o":{"x":1,"x":[1,2,3]},"o":{"y":2,"y":"z"}})"),
            std::string(R"({"o": {"y": "z"}})").size());
  EXPECT_EQ(printed(R"([{"k":1,"k":2},{"k":3}])"), std::string(R"([{"k": 2}, {"k": 3}])").size());
  // Keys are compared decoded: "\u0061" is "a".
  EXPECT_EQ(printed(R"({"a":1,"\u0061":22})"), std::string(R"({"a": 22})").size());
}

TEST(ScanJsonb, DecodesEscapesAndEscapesAgainAsEscapeJsonDoes) {
  EXPECT_EQ(printed(R"("\u00e9")"), 4U);                           // "é": two bytes
  EXPECT_EQ(printed(R"("\ud83d\udce6")"), 6U);                     // "📦": four bytes
  EXPECT_EQ(printed(R"("\/")"), 3U);                               // "/"
  EXPECT_EQ(printed(R"("\u001b")"), 8U);                           // "\u001b"
  EXPECT_EQ(printed(R"("\u0008\u000c\u000a\u000d\u0009")"), 12U);  // "\b\f\n\r\t"
  EXPECT_EQ(printed(R"("\u0022\u005c")"), 6U);                     // "\"\\"
  EXPECT_EQ(printed("\"\x7f\xc2\x85\""), 5U);  // DEL and U+0085 stay as they are
  EXPECT_EQ(printed(R"("\u0041")"), 3U);       // "A"
}

TEST(ScanJsonb, PrintsNumbersAsNumericOutDoes) {
  EXPECT_EQ(numeric_text_bytes("1e2"), 3);            // 100
  EXPECT_EQ(numeric_text_bytes("-0"), 1);             // 0
  EXPECT_EQ(numeric_text_bytes("-0.0"), 3);           // 0.0
  EXPECT_EQ(numeric_text_bytes("0.000"), 5);          // 0.000
  EXPECT_EQ(numeric_text_bytes("1E-5"), 7);           // 0.00001
  EXPECT_EQ(numeric_text_bytes("123.4500e3"), 8);     // 123450.0
  EXPECT_EQ(numeric_text_bytes("-12.5e3"), 6);        // -12500
  EXPECT_EQ(numeric_text_bytes("0.5"), 3);            // 0.5
  EXPECT_EQ(numeric_text_bytes("-0.05e1"), 4);        // -0.5
  EXPECT_EQ(numeric_text_bytes("1e999"), 1000);       // a one and 999 zeros
  EXPECT_EQ(numeric_text_bytes("1e131071"), 131072);  // the most digits before the point
  EXPECT_EQ(numeric_text_bytes("1e131072"), -1);
  EXPECT_EQ(numeric_text_bytes("1e-16383"), 16385);  // 0. and 16383 digits
  EXPECT_EQ(numeric_text_bytes("1e-16384"), -1);
  EXPECT_EQ(numeric_text_bytes("0e-16383"), 16385);  // a zero keeps its scale
  EXPECT_EQ(numeric_text_bytes("0e-16384"), -1);
  EXPECT_EQ(numeric_text_bytes("0e1073741822"), 1);
  EXPECT_EQ(numeric_text_bytes("0e1073741823"), -1);  // numeric_in's exponent limit
  EXPECT_EQ(numeric_text_bytes("1e+00000000000000000002"), 3);
}

TEST(ScanJsonb, RefusesWhatJsonbRefusesSayingWhere) {
  EXPECT_TRUE(
      scan_jsonb(R"(["\ud800"])")
          .problem.starts_with(
              "is not valid JSON: the high surrogate at byte 2 must be followed by a low one"));
  EXPECT_TRUE(
      scan_jsonb(R"("\udc00")")
          .problem.starts_with(
              "is not valid JSON: the low surrogate at byte 1 must follow a high surrogate"));
  EXPECT_TRUE(scan_jsonb(R"("\ud800\u0041")").problem.find("high surrogate") != std::string::npos);
  EXPECT_TRUE(scan_jsonb("\"a\x01\"").problem.find("raw control character 0x01 at byte 2") !=
              std::string::npos);
  EXPECT_TRUE(scan_jsonb("\"\xff\"").problem.starts_with("is not valid UTF-8 (at byte 1)"));
  EXPECT_TRUE(scan_jsonb("\"\xc0\xaf\"").problem.starts_with("is not valid UTF-8"));  // overlong
  EXPECT_TRUE(scan_jsonb("[1e131072]")
                  .problem.starts_with(
                      "has a number outside PostgreSQL's numeric range at byte 1 (1e131072)"));
  EXPECT_NE(scan_jsonb("[1,]").problem, "");
  EXPECT_NE(scan_jsonb("-").problem, "");
  EXPECT_NE(scan_jsonb("1.").problem, "");
  EXPECT_NE(scan_jsonb(".5").problem, "");
  EXPECT_NE(scan_jsonb("+1").problem, "");
  EXPECT_NE(scan_jsonb("1e").problem, "");
  EXPECT_NE(scan_jsonb("truex").problem, "");
  EXPECT_NE(scan_jsonb("\"\\x\"").problem, "");
  EXPECT_NE(scan_jsonb("\"\\u12\"").problem, "");
}

TEST(ScanJsonb, CollectsTheTopLevelMembersOnlyWhenAsked) {
  EXPECT_TRUE(scan_jsonb(R"({"a":"x"})").members.empty());
  const JsonbScan scan = scan_jsonb(R"({"a":"x","b":{"c":"d"},"a":"yz"})", true);
  ASSERT_EQ(scan.members.size(), 2U);
  EXPECT_TRUE(scan.members.at("a").is_string);
  EXPECT_EQ(scan.members.at("a").value_bytes, 2U);
  EXPECT_FALSE(scan.members.at("b").is_string);
  EXPECT_TRUE(scan.is_object);
}

// The scan takes plain bytes eight at a time: whatever ends a run (in a string a quote, a
// backslash or a control byte; in the check of the bytes a NUL or a byte >= 0x80) is found at
// every position of a word and of the tail after the last whole word.
TEST(ScanJsonb, FindsWhatEndsARunOfPlainBytesAtEveryPosition) {
  for (std::size_t before = 0; before <= 19; ++before) {
    for (std::size_t after = 0; after <= 9; ++after) {
      const std::string a(before, 'a');
      const std::string b(after, 'b');
      const std::uint64_t plain = 2 + before + after;  // the quoted string around the escape
      // {"k": "...\n..."}: `{"k": ` is 6 bytes, the closing brace 1.
      EXPECT_EQ(printed("{\"k\":\"" + a + "\\n" + b + "\"}"), 6 + plain + 2 + 1);
      EXPECT_EQ(printed("{\"k\":\"" + a + "\\\"" + b + "\"}"), 6 + plain + 2 + 1);
      EXPECT_EQ(printed("{\"k\":\"" + a + "\\\\" + b + "\"}"), 6 + plain + 2 + 1);
      EXPECT_EQ(printed("{\"k\":\"" + a + "\u00e9" + b + "\"}"), 6 + plain + 2 + 1);  // é
      EXPECT_EQ(printed("{\"" + a + "\":\"" + b + "\"}"), 1 + (2 + before) + 2 + (2 + after) + 1);
      const std::string control = "\"" + a + '\x1f' + b + "\"";
      EXPECT_EQ(scan_jsonb(control).problem,
                "is not valid JSON: a string holds the raw control character 0x1f at byte " +
                    std::to_string(1 + before) + "; escape it (\\n, \\t, \\u001b ...)");
      const std::string nul = "\"" + a + std::string(1, '\0') + b + "\"";
      EXPECT_EQ(scan_jsonb(nul).problem,
                "contains a NUL byte (at byte " + std::to_string(1 + before) +
                    "); JSON text cannot (write it as \\u0000 inside a string, which jsonb "
                    "refuses too)");
      const std::string invalid = "\"" + a + '\xff' + b + "\"";
      EXPECT_EQ(scan_jsonb(invalid).problem,
                "is not valid UTF-8 (at byte " + std::to_string(1 + before) + "); send UTF-8 text");
      const std::string lone = "\"" + a + '\x80' + b + "\"";  // the lowest byte >= 0x80
      EXPECT_EQ(scan_jsonb(lone).problem,
                "is not valid UTF-8 (at byte " + std::to_string(1 + before) + "); send UTF-8 text");
      // A control byte right after a two-byte character, in the same word.
      const std::string after_two_bytes = "\"" + a + "\u00e9\x01" + b + "\"";
      EXPECT_EQ(scan_jsonb(after_two_bytes).problem,
                "is not valid JSON: a string holds the raw control character 0x01 at byte " +
                    std::to_string(3 + before) + "; escape it (\\n, \\t, \\u001b ...)");
      // The bytes just past the ranges that end a run print as they are.
      EXPECT_EQ(printed("\"" + a + " \x7f!#[]" + b + "\""), 2 + before + 6 + after);
      const std::string unclosed = "\"" + a + b;
      EXPECT_EQ(scan_jsonb(unclosed).problem,
                "is not valid JSON: the string at byte 0 is not closed");
    }
  }
}

}  // namespace
}  // namespace outbox::detail
