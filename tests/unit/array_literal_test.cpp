// PostgreSQL array literals (pg/array_literal.hpp), read back by a reader that follows
// PostgreSQL's own rules (array_in).

#include "pg/array_literal.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace outbox::pg {
namespace {

// --- PostgreSQL array literals ---
//
// A reader for one-dimensional array literals following the rules in the PostgreSQL manual
// (section 8.15.6 "Array Input and Output Syntax"): elements between { and } separated by commas;
// a double-quoted element may contain anything, with \ escaping the next character; an unquoted
// element has surrounding whitespace removed, may use \ escapes too, and is NULL when it is the
// word NULL (any case). Returns nullopt for text PostgreSQL would refuse.
using ArrayElements = std::vector<std::optional<std::string>>;

bool is_array_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::optional<ArrayElements> parse_array_literal(const std::string& literal) {
  std::size_t i = 0;
  auto skip_space = [&] {
    while (i < literal.size() && is_array_space(literal[i])) ++i;
  };
  skip_space();
  if (i == literal.size() || literal[i] != '{') return std::nullopt;
  ++i;
  ArrayElements elements;
  skip_space();
  if (i < literal.size() && literal[i] == '}') {
    ++i;
  } else {
    for (;;) {
      skip_space();
      if (i == literal.size()) return std::nullopt;
      std::string value;
      bool quoted = false;
      bool escaped_any = false;
      if (literal[i] == '"') {
        quoted = true;
        ++i;
        for (;;) {
          if (i == literal.size()) return std::nullopt;  // unterminated
          const char c = literal[i++];
          if (c == '"') break;
          if (c == '\\') {
            if (i == literal.size()) return std::nullopt;
            value.push_back(literal[i++]);
          } else {
            value.push_back(c);
          }
        }
        skip_space();
      } else {
        std::size_t trailing_space = 0;  // unescaped whitespace at the end is not part of it
        while (i < literal.size() && literal[i] != ',' && literal[i] != '}') {
          const char c = literal[i++];
          if (c == '"' || c == '{') return std::nullopt;
          if (c == '\\') {
            if (i == literal.size()) return std::nullopt;
            value.push_back(literal[i++]);
            escaped_any = true;
            trailing_space = 0;
          } else {
            value.push_back(c);
            trailing_space = is_array_space(c) ? trailing_space + 1 : 0;
          }
        }
        value.resize(value.size() - trailing_space);
        if (value.empty()) return std::nullopt;  // {a,,b} is refused
      }
      const bool is_null = !quoted && !escaped_any && value.size() == 4 &&
                           (value[0] | 0x20) == 'n' && (value[1] | 0x20) == 'u' &&
                           (value[2] | 0x20) == 'l' && (value[3] | 0x20) == 'l';
      elements.push_back(is_null ? std::nullopt : std::optional<std::string>(value));
      if (i == literal.size()) return std::nullopt;
      if (literal[i] == ',') {
        ++i;
        continue;
      }
      if (literal[i] == '}') {
        ++i;
        break;
      }
      return std::nullopt;  // e.g. text right after a closing quote
    }
  }
  skip_space();
  if (i != literal.size()) return std::nullopt;
  return elements;
}

ArrayElements as_elements(const std::vector<std::string>& values) {
  return ArrayElements(values.begin(), values.end());
}

// The reader itself must be right for the round trip below to mean anything.
TEST(ArrayLiteralReader, FollowsThePostgresRules) {
  EXPECT_EQ(parse_array_literal("{}"), ArrayElements{});
  EXPECT_EQ(parse_array_literal(R"({a, b ,c})"), (ArrayElements{"a", "b", "c"}));
  EXPECT_EQ(parse_array_literal(R"({"a,b","c\"d","e\\f"})"),
            (ArrayElements{"a,b", "c\"d", "e\\f"}));
  EXPECT_EQ(parse_array_literal(R"({NULL,"NULL",null,\NULL})"),
            (ArrayElements{std::nullopt, "NULL", std::nullopt, "NULL"}));
  EXPECT_EQ(parse_array_literal(R"({""," "})"), (ArrayElements{"", " "}));
  EXPECT_EQ(parse_array_literal(R"({"a" , "b" })"), (ArrayElements{"a", "b"}));
  EXPECT_EQ(parse_array_literal(R"({a\ })"), (ArrayElements{"a "}));
  EXPECT_EQ(parse_array_literal(R"({"a)"), std::nullopt);
  EXPECT_EQ(parse_array_literal(R"({"a"b})"), std::nullopt);
  EXPECT_EQ(parse_array_literal(R"({a,,b})"), std::nullopt);
  EXPECT_EQ(parse_array_literal(R"({a,b)"), std::nullopt);
  EXPECT_EQ(parse_array_literal(R"({a}x)"), std::nullopt);
  EXPECT_EQ(parse_array_literal(R"(a,b)"), std::nullopt);
}

TEST(ArrayLiteral, EmptyListIsEmptyBraces) { EXPECT_EQ(text_array({}), "{}"); }

TEST(ArrayLiteral, QuotesEveryElement) {
  EXPECT_EQ(text_array({"a"}), R"({"a"})");
  EXPECT_EQ(text_array({"a", "b"}), R"({"a","b"})");
}

TEST(ArrayLiteral, EmptyStringIsAQuotedEmptyElement) {
  EXPECT_EQ(text_array({""}), R"({""})");
  EXPECT_EQ(text_array({"", ""}), R"({"",""})");
  EXPECT_EQ(parse_array_literal(text_array({""})), ArrayElements{""});
}

TEST(ArrayLiteral, EscapesQuoteAndBackslash) {
  EXPECT_EQ(text_array({R"(say "hi")"}), R"({"say \"hi\""})");
  EXPECT_EQ(text_array({R"(C:\dir\)"}), R"({"C:\\dir\\"})");
  EXPECT_EQ(text_array({R"(\")"}), R"({"\\\""})");
}

TEST(ArrayLiteral, LeavesCommasBracesAndSpacesInsideQuotes) {
  EXPECT_EQ(text_array({"a,b", "{c}", " d "}), R"({"a,b","{c}"," d "})");
}

TEST(ArrayLiteral, TheWordNullStaysAString) {
  EXPECT_EQ(parse_array_literal(text_array({"NULL", "null"})), (ArrayElements{"NULL", "null"}));
}

TEST(ArrayLiteral, CarriesJsonDocumentsUnchanged) {
  const std::vector<std::string> documents = {R"({"a": "x,y", "b": "q\"uote", "c": "back\\slash"})",
                                              "[]", R"("{}")"};
  EXPECT_EQ(parse_array_literal(text_array(documents)), as_elements(documents));
}

TEST(ArrayLiteralBuilder, QuotesAddAndNotAddPlainAndClosesOnce) {
  ArrayLiteral literal;
  literal.add_plain("0190f5c2-7d3e-7a41-9c7e-2b1d4e5f6a7b");
  literal.add(R"(a"b)");
  literal.add_plain("t");
  EXPECT_EQ(literal.text(), R"({0190f5c2-7d3e-7a41-9c7e-2b1d4e5f6a7b,"a\"b",t})");
  EXPECT_EQ(literal.text(), R"({0190f5c2-7d3e-7a41-9c7e-2b1d4e5f6a7b,"a\"b",t})");
  EXPECT_THROW(literal.add("late"), std::logic_error);
  ArrayLiteral empty;
  EXPECT_EQ(empty.text(), "{}");
}

TEST(AppendArrayElement, AppendsOneQuotedElement) {
  std::string literal = "{";
  append_array_element(literal, "x");
  literal.push_back(',');
  append_array_element(literal, R"(a"b\c)");
  literal.push_back('}');
  EXPECT_EQ(literal, R"({"x","a\"b\\c"})");
  EXPECT_EQ(parse_array_literal(literal), (ArrayElements{"x", R"(a"b\c)"}));
}

TEST(AppendArrayElement, MatchesToArrayLiteral) {
  const std::vector<std::string> values = {"p", "", R"(\"{,})"};
  std::string literal = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) literal.push_back(',');
    append_array_element(literal, values[i]);
  }
  literal.push_back('}');
  EXPECT_EQ(literal, text_array(values));
}

TEST(ArrayLiteral, RoundTripsRandomStrings) {
  // Pieces PostgreSQL's array syntax gives meaning to, plus ordinary text and multi-byte UTF-8.
  const std::vector<std::string> pieces = {"{",
                                           "}",
                                           ",",
                                           "\"",
                                           "\\",
                                           " ",
                                           "\t",
                                           "\n",
                                           "a",
                                           "Z",
                                           "0",
                                           "NULL",
                                           "\\\"",
                                           "\"\"",
                                           "\xC3\xA9" /* é */,
                                           "\xE2\x82\xAC" /* € */,
                                           "\xF0\x9F\x93\xA6" /* 📦 */,
                                           "'",
                                           ";",
                                           "$1"};
  std::mt19937 random(20240611);
  std::uniform_int_distribution<std::size_t> element_count(0, 6);
  std::uniform_int_distribution<std::size_t> piece_count(0, 8);
  std::uniform_int_distribution<std::size_t> piece_index(0, pieces.size() - 1);

  for (int round = 0; round < 2000; ++round) {
    std::vector<std::string> values(element_count(random));
    for (std::string& value : values) {
      for (std::size_t n = piece_count(random); n > 0; --n) value += pieces[piece_index(random)];
    }
    const std::string literal = text_array(values);
    ASSERT_EQ(parse_array_literal(literal), as_elements(values)) << "literal: " << literal;
  }
}

TEST(UuidArray, ListsEventIdsUnquoted) {
  const EventId a = EventId::generate();
  const EventId b = EventId::generate();
  EXPECT_EQ(uuid_array(std::vector<EventId>{}), "{}");
  EXPECT_EQ(uuid_array(std::vector<EventId>{a, b}),
            "{" + a.to_string() + "," + b.to_string() + "}");
}

}  // namespace
}  // namespace outbox::pg
