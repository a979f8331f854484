// parse_duration: the forms flags accept, and the errors for the ones they refuse.

#include "outbox/duration.hpp"

#include <gtest/gtest.h>

#include "contains.hpp"
#include "outbox/error.hpp"

namespace outbox {
namespace {

using namespace std::chrono_literals;

TEST(Duration, ReadsEveryUnitAndSums) {
  EXPECT_EQ(parse_duration("0"), 0ms);
  EXPECT_EQ(parse_duration("0s"), 0ms);
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("30s"), 30s);
  EXPECT_EQ(parse_duration("15m"), 15min);
  EXPECT_EQ(parse_duration("24h"), 24h);
  EXPECT_EQ(parse_duration("7d"), 168h);
  EXPECT_EQ(parse_duration("1h30m"), 90min);
  EXPECT_EQ(parse_duration("1d2h3m4s5ms"), 26h + 3min + 4s + 5ms);
}

std::string error_of(std::string_view text) {
  try {
    parse_duration(text);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Duration, RefusesWhatIsNotADurationAndSaysWhy) {
  EXPECT_TRUE(contains(error_of(""), "empty"));
  EXPECT_TRUE(contains(error_of("30"), "needs a unit"));
  EXPECT_TRUE(contains(error_of("7w"), "unknown unit \"w\""));
  EXPECT_TRUE(contains(error_of("-5s"), "negative"));
  EXPECT_TRUE(contains(error_of("s"), "expected a number"));
  EXPECT_TRUE(contains(error_of("5s "), "expected a number"));
  EXPECT_TRUE(contains(error_of("99999999999999999999d"), "too large"));
  EXPECT_TRUE(contains(error_of("9999999999999d"), "too large"));
  // Accepted before, and then overflowed the clock a wait added it to (a reporter that spun).
  EXPECT_TRUE(contains(error_of("200000d"), "at most 3650d"));
  EXPECT_TRUE(contains(error_of("3650d1ms"), "at most 3650d"));
  EXPECT_EQ(parse_duration("3650d"), std::chrono::hours(24 * 3650));
  EXPECT_TRUE(contains(error_of("1.5h"), "whole numbers only"));
  EXPECT_TRUE(contains(error_of("7D"), "unknown unit \"D\""));
  EXPECT_TRUE(contains(error_of("7x"), "e.g. 500ms"));
}

// Found by tests/fuzz/duration_fuzz.cpp: from_chars reads "-0" as 0, so "-0s" and "1h-0m" passed.
TEST(Duration, RefusesAMinusSignEvenOnZero) {
  EXPECT_TRUE(contains(error_of("-0s"), "cannot be negative"));
  EXPECT_TRUE(contains(error_of("1h-0m"), "cannot be negative"));
}

// The input is quoted back escaped: a flag value with ESC or a newline cannot act on the terminal.
TEST(Duration, QuotesTheInputEscaped) {
  const std::string message = error_of("5\x1b[2J");
  EXPECT_TRUE(contains(message, "duration \"5\\x1b[2J\""));
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
}

// Error messages print durations as flags take them, largest units first.
TEST(Duration, FormatsAsTheFlagsWriteIt) {
  using std::chrono::milliseconds;
  EXPECT_EQ(format_duration(milliseconds(0)), "0");
  EXPECT_EQ(format_duration(milliseconds(500)), "500ms");
  EXPECT_EQ(format_duration(std::chrono::hours(1) + std::chrono::minutes(30)), "1h30m");
  EXPECT_EQ(format_duration(std::chrono::days(7)), "7d");
  EXPECT_EQ(format_duration(std::chrono::days(1) + milliseconds(1)), "1d1ms");
  EXPECT_EQ(format_duration(milliseconds(-1500)), "-1s500ms");
  EXPECT_EQ(format_duration(milliseconds::min()), "-106751991167d7h12m55s808ms");
  for (const char* text : {"1h30m", "3650d", "59m59s999ms", "1s"}) {
    EXPECT_EQ(format_duration(parse_duration(text)), text);
  }
}

TEST(Duration, ARangeCheckNamesTheSettingTheValueAndTheRange) {
  using std::chrono::milliseconds;
  const auto refusal = [](milliseconds value) -> std::string {
    try {
      check_duration_range(value, milliseconds(100), std::chrono::hours(1), "--backlog-refresh",
                           "why it matters");
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return {};
  };
  EXPECT_EQ(refusal(milliseconds(100)), "");
  EXPECT_EQ(refusal(std::chrono::hours(1)), "");
  EXPECT_EQ(refusal(std::chrono::days(3650)),
            "--backlog-refresh of 3650d is out of range: give 100ms to 1h; why it matters");
  EXPECT_EQ(refusal(milliseconds(99)),
            "--backlog-refresh of 99ms is out of range: give 100ms to 1h; why it matters");
  EXPECT_EQ(refusal(std::chrono::hours(1) + milliseconds(1)),
            "--backlog-refresh of 1h1ms is out of range: give 100ms to 1h; why it matters");
  EXPECT_THROW(check_duration_range(milliseconds(-1), milliseconds(0), milliseconds(5), "x"),
               InvalidArgument);
}

}  // namespace
}  // namespace outbox
