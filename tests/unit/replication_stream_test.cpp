// The pure parts of the replication stream (src/cdc/replication_stream.hpp): slot and publication
// names, the publication_names literal, LSN parsing, when a status update is due, and how server
// errors are classified (with the SQLSTATEs and messages PostgreSQL 15 sent in
// tests/integration/replication_stream_pgtest.cpp).

#include "cdc/replication_stream.hpp"

#include <gtest/gtest.h>

#include <string>

#include "contains.hpp"

namespace outbox::cdc {
namespace {

using namespace std::chrono_literals;
using Clock = StatusSchedule::Clock;

std::string refusal(void (*validate)(std::string_view), std::string_view name) {
  try {
    validate(name);
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

TEST(ReplicationNamesTest, SlotNamesArePostgresOwnRule) {
  EXPECT_EQ(refusal(validate_slot_name, "orders_cdc_1"), "");
  EXPECT_EQ(refusal(validate_slot_name, "_"), "");
  EXPECT_EQ(refusal(validate_slot_name, std::string(63, 'a')), "");
  EXPECT_TRUE(contains(refusal(validate_slot_name, ""), "it is empty"));
  EXPECT_TRUE(contains(refusal(validate_slot_name, std::string(64, 'a')), "64 bytes long"));
  EXPECT_TRUE(contains(refusal(validate_slot_name, "Orders"), "byte 0 (0x4f) is not allowed"));
  EXPECT_TRUE(contains(refusal(validate_slot_name, "a-b"), "byte 1 (0x2d)"));
  EXPECT_TRUE(contains(refusal(validate_slot_name, "a\"b"), "byte 1 (0x22)"));
  EXPECT_TRUE(contains(refusal(validate_slot_name, "a b"), "byte 1 (0x20)"));
  EXPECT_TRUE(contains(refusal(validate_slot_name, "caf\xc3\xa9"), "byte 3 (0xc3)"));
  // The name is shown escaped: a newline cannot forge a log line.
  const std::string shown = refusal(validate_slot_name, "a\nb");
  EXPECT_TRUE(contains(shown, "\"a\\x0ab\""));
  EXPECT_TRUE(contains(shown, "1 to 63 lower-case letters, digits and '_'"));
}

TEST(ReplicationNamesTest, PublicationNamesAreIdentifiersWithoutControls) {
  EXPECT_EQ(refusal(validate_publication_name, "orders_pub"), "");
  EXPECT_EQ(refusal(validate_publication_name, "Orders \"pub\", 'x'"), "");
  EXPECT_EQ(refusal(validate_publication_name, "caf\xc3\xa9"), "");
  EXPECT_EQ(refusal(validate_publication_name, std::string(63, 'p')), "");
  EXPECT_TRUE(contains(refusal(validate_publication_name, ""), "it is empty"));
  EXPECT_TRUE(contains(refusal(validate_publication_name, std::string(64, 'p')), "64 bytes long"));
  EXPECT_TRUE(contains(refusal(validate_publication_name, "a\x1b[2Jb"), "U+001B at byte 1"));
  EXPECT_TRUE(contains(refusal(validate_publication_name, std::string("a\0b", 3)), "at byte 1"));
  EXPECT_TRUE(contains(refusal(validate_publication_name, "a\xff"), "at byte 1"));
}

TEST(ReplicationNamesTest, PublicationNamesLiteralQuotesForBothParsers) {
  EXPECT_EQ(publication_names_literal("orders_pub"), R"('"orders_pub"')");
  // pgoutput splits the value as identifiers: double quotes keep case and commas, '"' is doubled;
  // the replication command's string literal doubles '\''.
  EXPECT_EQ(publication_names_literal("Orders,pub"), R"('"Orders,pub"')");
  EXPECT_EQ(publication_names_literal(R"(a"b)"), R"('"a""b"')");
  EXPECT_EQ(publication_names_literal("it's"), R"('"it''s"')");
  EXPECT_EQ(publication_names_literal(std::vector<std::string>{"a", "B\"c", "it's"}),
            R"('"a","B""c","it''s"')");
}

TEST(ReplicationLsnTest, ParsesWhatPgLsnPrints) {
  EXPECT_EQ(parse_lsn("0/0"), Lsn{0});
  EXPECT_EQ(parse_lsn("16/B374D848"), Lsn{0x16B374D848});
  EXPECT_EQ(parse_lsn("ffffffff/ffffffff"), Lsn{0xFFFFFFFFFFFFFFFF});
  EXPECT_EQ(parse_lsn(format_lsn(0x1234'5678'9ABC'DEF0)), Lsn{0x1234'5678'9ABC'DEF0});
  for (const char* bad : {"", "/", "0/", "/0", "0", "g/0", "0/0 ", " 0/0", "1/2/3", "-1/0",
                          "100000000/0", "0/100000000", "+1/0"}) {
    EXPECT_EQ(parse_lsn(bad), std::nullopt) << bad;
  }
}

TEST(StatusScheduleTest, DueEveryIntervalAfterTheLastSent) {
  const Clock::time_point start{std::chrono::seconds(1000)};
  StatusSchedule schedule(10s, start);
  EXPECT_EQ(schedule.interval(), 10s);
  EXPECT_FALSE(schedule.due(start));
  EXPECT_EQ(schedule.until_due(start), 10s);
  EXPECT_EQ(schedule.until_due(start + 9'999'999us), 1ms) << "rounded up, never 0 before due";
  EXPECT_FALSE(schedule.due(start + 9'999'999us));
  EXPECT_TRUE(schedule.due(start + 10s));
  EXPECT_EQ(schedule.until_due(start + 25s), 0ms);
  schedule.sent(start + 25s);
  EXPECT_FALSE(schedule.due(start + 34s));
  EXPECT_EQ(schedule.until_due(start + 34s), 1s);
  EXPECT_TRUE(schedule.due(start + 35s));
}

TEST(StatusScheduleTest, AReplyRequestIsDueAtOnceUntilSent) {
  const Clock::time_point start{std::chrono::seconds(1000)};
  StatusSchedule schedule(10s, start);
  schedule.reply_requested();
  EXPECT_TRUE(schedule.due(start));
  EXPECT_EQ(schedule.until_due(start), 0ms);
  EXPECT_TRUE(schedule.due(start + 1s)) << "stays due until a status goes out";
  schedule.sent(start + 1s);
  EXPECT_FALSE(schedule.due(start + 1s));
  EXPECT_EQ(schedule.until_due(start + 1s), 10s);
}

TEST(StatusScheduleTest, RefusesANonPositiveInterval) {
  EXPECT_THROW(StatusSchedule(0ms), InvalidArgument);
  EXPECT_THROW(StatusSchedule(-1ms), InvalidArgument);
}

TEST(ReplicationErrorTest, ClassifiesWhatPostgres15Sends) {
  using F = ReplicationFailure;
  // The messages as PostgreSQL 15 sent them (ReplicationStreamTest).
  EXPECT_EQ(classify_replication_error("42704", "replication slot \"s\" does not exist", ""),
            F::slot_missing);
  EXPECT_EQ(classify_replication_error("42704", "publication \"p\" does not exist", ""),
            F::publication_missing);
  EXPECT_EQ(classify_replication_error("42704", "type \"x\" does not exist", ""), F::other)
      << "same SQLSTATE, neither slot nor publication";
  EXPECT_EQ(classify_replication_error("55006", "replication slot \"s\" is active for PID 42", ""),
            F::slot_in_use);
  EXPECT_EQ(classify_replication_error("42710", "replication slot \"s\" already exists", ""),
            F::slot_exists);
  EXPECT_EQ(classify_replication_error(
                "55000", "cannot read from logical replication slot \"s\"",
                "This slot has been invalidated because it exceeded the maximum reserved size."),
            F::slot_invalidated);
  EXPECT_EQ(classify_replication_error("55000",
                                       "can no longer get changes from replication slot "
                                       "\"s\"",
                                       ""),
            F::slot_invalidated);
  EXPECT_EQ(classify_replication_error(
                "55000", "replication slot \"s\" was not created in this database", ""),
            F::other);
  EXPECT_EQ(
      classify_replication_error(
          "58P01", "requested WAL segment 000000010000000000000003 has already been removed", ""),
      F::slot_invalidated);
  EXPECT_EQ(classify_replication_error("58P01", "could not open file \"x\"", ""), F::other);
  EXPECT_EQ(classify_replication_error("42501", "permission denied", ""), F::not_permitted);
  EXPECT_EQ(classify_replication_error("57P01",
                                       "terminating connection due to administrator command", ""),
            F::unavailable);
  EXPECT_EQ(classify_replication_error("08006", "", ""), F::unavailable);
  EXPECT_EQ(classify_replication_error("", "", ""), F::other);
  EXPECT_EQ(to_string(F::slot_invalidated), "slot_invalidated");
  EXPECT_EQ(to_string(F::publication_missing), "publication_missing");
}

}  // namespace
}  // namespace outbox::cdc
