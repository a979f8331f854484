// Values from outside shown safely: detail::printable and find_hostile_character, and the
// `outbox quarantine list` lines built with them (issue "Hardening" #3).

#include "common/printable.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "contains.hpp"
#include "outbox/quarantine_format.hpp"

namespace outbox {
namespace {

using detail::find_hostile_character;
using detail::printable;

TEST(Printable, KeepsPrintableTextIncludingUnicode) {
  EXPECT_EQ(printable("order 4711"), "order 4711");
  EXPECT_EQ(printable("M\xc3\xbcller \xe6\xb3\xa8\xe6\x96\x87 \xf0\x9f\x93\xa6"),
            "M\xc3\xbcller \xe6\xb3\xa8\xe6\x96\x87 \xf0\x9f\x93\xa6");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, EscapesWhatATerminalWouldActOn) {
  EXPECT_EQ(printable("a\x1b[2Jb"), "a\\x1b[2Jb");            // clear screen
  EXPECT_EQ(printable("x\ny\rz\tw"), "x\\x0ay\\x0dz\\x09w");  // forged log lines
  EXPECT_EQ(printable(std::string("nul\0", 4)), "nul\\x00");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(printable("c1\xc2\x9b"
                      "31m"),
            "c1\\u009b31m");                                             // CSI as one C1 byte
  EXPECT_EQ(printable("gpj\xe2\x80\xae.exe"), "gpj\\u202e.exe");         // right-to-left override
  EXPECT_EQ(printable("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069");  // isolates
  EXPECT_EQ(printable("a\xe2\x80\xa8"
                      "b"),
            "a\\u2028b");                                   // line separator
  EXPECT_EQ(printable("bad\xff\xc3"), "bad\\xff\\xc3");     // not UTF-8
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // an encoded surrogate
}

// Otherwise "\x1b" typed by a writer and a real ESC would print alike.
TEST(Printable, DoublesBackslashes) { EXPECT_EQ(printable("a\\x1b"), "a\\\\x1b"); }

TEST(Printable, CutsLongTextAtACharacterBoundary) {
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable("ab\xc3\xa9", 3), "ab\xc3\xa9");  // é is not split
  EXPECT_EQ(printable(std::string(10000, 'x')).size(), 4096U + 3U);
}

TEST(FindHostileCharacter, SaysWhatAndWhere) {
  EXPECT_FALSE(find_hostile_character("plain text \xc3\xa9"));
  const auto esc = find_hostile_character("ab\x1b");
  ASSERT_TRUE(esc);
  EXPECT_EQ(esc->offset, 2U);
  EXPECT_EQ(esc->what, "the control character U+001B");
  EXPECT_EQ(find_hostile_character("x\xe2\x80\xae")->what, "the bidirectional control U+202E");
  EXPECT_EQ(find_hostile_character("x\xc2\x85")->what, "the control character U+0085");
  EXPECT_EQ(find_hostile_character("\xff")->what, "a byte that is not UTF-8 (0xff)");
  EXPECT_EQ(find_hostile_character(std::string("\0", 1))->what, "a NUL byte");
  // Neighbours of the refused ranges are fine.
  // Neighbours of the refused ranges are fine: ~, U+00A0, U+2027, U+202F, U+2065, U+206A.
  EXPECT_FALSE(find_hostile_character("~\xc2\xa0\xe2\x80\xa7\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa"));
}

QuarantinedEvent hostile_event() {
  QuarantinedEvent event;
  event.aggregate_type = "order\x1b[2J";
  event.aggregate_id = "4711\n2026-12-01T00:00:00.000 info [outbox] relay r1 stopped";
  event.aggregate_sequence = 3;
  event.event_type = "Paid\xe2\x80\xae";
  event.reason = "permanent failure";
  event.last_error = "topic \"outbox.order\x1b[2J\" ...\x07";
  event.attempt_count = 1;
  event.blocked_events = 2;
  event.quarantined_at = "2026-12-02 20:50:42.630233+00";
  return event;
}

TEST(QuarantinedText, EscapesEveryFieldFromTheDatabase) {
  const std::string text = cli::quarantined_text(hostile_event());
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos) << text;
  EXPECT_TRUE(contains(text, "order\\x1b[2J 4711\\x0a2026-12-01T00:00:00.000 info"));
  EXPECT_TRUE(contains(text,
                       "Paid\\u202e  permanent failure, 1 attempt, since "
                       "2026-12-02 20:50:42+00; 2 blocked"))
      << text;
  EXPECT_TRUE(contains(text, "\n    topic \"outbox.order\\x1b[2J\" ...\\x07\n"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << "two lines, no forged third";
  QuarantinedEvent tried = hostile_event();
  tried.attempt_count = 25;
  EXPECT_TRUE(contains(cli::quarantined_text(tried), ", 25 attempts, since"));
}

TEST(QuarantinedJson, EscapesControlsAndNonAscii) {
  QuarantinedEvent event = hostile_event();
  event.aggregate_id = "caf\xc3\xa9\xc2\x85";
  const std::string json = cli::quarantined_json(event);
  EXPECT_EQ(json.find('\x1b'), std::string::npos) << json;
  EXPECT_TRUE(contains(json, R"("aggregate_type":"order\u001b[2J")"));
  EXPECT_TRUE(contains(json, R"("aggregate_id":"caf\u00e9\u0085")"));
  EXPECT_TRUE(contains(json, R"("event_type":"Paid\u202e")"));
  event.aggregate_id = "not utf-8 \xff";  // possible in a SQL_ASCII database
  EXPECT_TRUE(contains(cli::quarantined_json(event), R"("aggregate_id":"not utf-8 \ufffd")"));
}

}  // namespace
}  // namespace outbox
