// The statements a change-data-capture relay adds to the polling relay's: completions of rows
// claimed by no one (the stream brought them), a claim that leaves the rows its stream will bring
// to the stream, and the question whether a lower sequence of an aggregate is still pending.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "relay/cdc/cdc_sql.hpp"
#include "relay/relay_sql.hpp"
#include "support/test_env.hpp"

namespace outbox {
namespace {

using testing::connect;
using testing::count;
using testing::fresh_schema;

class RelaySqlStreams : public ::testing::Test {
 protected:
  // One pending event; `age` shifts both occurred_at and available_at into the past.
  std::string insert(const std::string& aggregate, int sequence, const std::string& age = "0 s") {
    return std::string(
        pg::exec(conn_.get(),
                 "INSERT INTO " + events_ +
                     " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                     "  payload, occurred_at, available_at)"
                     " VALUES (gen_random_uuid(), 'order', $1, $2::bigint, 'OrderPlaced', '{}',"
                     "  now() - $3::interval, now() - $3::interval) RETURNING event_id::text",
                 {aggregate.c_str(), std::to_string(sequence).c_str(), age.c_str()})
            .text(0, 0));
  }
  long long where(const std::string& condition) {
    return count(conn_.get(), "SELECT count(*) FROM " + events_ + " WHERE " + condition);
  }
  // The event ids a claim with `horizon` takes (each aggregate's head, up to 100).
  std::vector<std::string> claim(const std::string& horizon) {
    const auto result =
        pg::exec(conn_.get(), relay_sql::claim(schema_),
                 {"cdc:1", "100", "30000", "", "", "{}", "67108864", "true", horizon.c_str()});
    std::vector<std::string> ids;
    for (const Event& event : relay_sql::read_claim(result).events) {
      ids.push_back(event.event_id.to_string());
    }
    return ids;
  }

  const SchemaName schema_ = fresh_schema();
  const std::string events_ = schema_.table("outbox_events");
  pg::Connection conn_ = connect();
};

TEST_F(RelaySqlStreams, AMarkWithoutATokenMarksOnlyRowsNoOneClaimed) {
  const std::string streamed = insert("o-1", 1);
  const std::string claimed = insert("o-2", 1);
  pg::exec(conn_.get(), "UPDATE " + events_ + " SET claimed_by = 'other:1' WHERE event_id = $1",
           {claimed.c_str()});
  const std::string ids = "{" + streamed + "," + claimed + "}";
  const auto result = pg::exec(conn_.get(), relay_sql::mark_published(schema_),
                               {ids.c_str(), "{NULL,NULL}", "cdc:1", "30000", "false", "1000"});
  const relay_sql::MarkRows rows = relay_sql::read_mark_published(result);
  ASSERT_EQ(rows.marked.size(), 1U);
  EXPECT_EQ(rows.marked[0], streamed);
  EXPECT_TRUE(rows.successors.empty());
  EXPECT_EQ(where("published_at IS NOT NULL"), 1);
  EXPECT_EQ(where("event_id = '" + claimed + "' AND published_at IS NULL"), 1)
      << "a row another relay claimed is its to mark";
}

// The change-data-capture relay's own mark: rows no one claimed or skipped, and again (its first
// answer lost with the connection) without changing the first mark's time.
TEST_F(RelaySqlStreams, TheStreamedMarkMarksOnlyUnclaimedUnskippedRowsAndRepeatsUnchanged) {
  const std::string streamed = insert("o-1", 1);
  const std::string claimed = insert("o-2", 1);
  const std::string skipped = insert("o-3", 1);
  const std::string absent = "00000000-0000-7000-8000-00000000abcd";
  pg::exec(conn_.get(), "UPDATE " + events_ + " SET claimed_by = 'other:1' WHERE event_id = $1",
           {claimed.c_str()});
  pg::exec(conn_.get(), "UPDATE " + events_ + " SET skipped_at = now() WHERE event_id = $1",
           {skipped.c_str()});
  const std::string ids = "{" + streamed + "," + claimed + "," + skipped + "," + absent + "}";
  const auto mark = [&] {
    return cdc_sql::read_mark_streamed(
        pg::exec(conn_.get(), cdc_sql::mark_streamed(schema_), {ids.c_str()}));
  };
  EXPECT_EQ(mark(), std::vector<std::string>{streamed});
  EXPECT_EQ(where("published_at IS NOT NULL"), 1);
  EXPECT_EQ(where("event_id = '" + claimed + "' AND published_at IS NULL"), 1)
      << "a row another relay claimed is its to mark";
  EXPECT_EQ(where("event_id = '" + skipped + "' AND published_at IS NULL"), 1);
  const std::string first(
      pg::exec(conn_.get(), "SELECT published_at::text FROM " + events_ + " WHERE event_id = $1",
               {streamed.c_str()})
          .text(0, 0));
  pg::exec(conn_.get(), "SELECT pg_sleep(0.01)");
  EXPECT_EQ(mark(), std::vector<std::string>{streamed}) << "a repeat is answered as written";
  EXPECT_EQ(where("event_id = '" + streamed + "' AND published_at::text = '" + first + "'"), 1);
}

TEST_F(RelaySqlStreams, AFailureWithoutATokenIsRecordedWithBackoffOrQuarantine) {
  const std::string retried = insert("o-1", 1);
  const std::string poisoned = insert("o-2", 1);
  const std::string throttled = insert("o-3", 1);
  const std::string ids = "{" + retried + "," + poisoned + "," + throttled + "}";
  const auto result =
      pg::exec(conn_.get(), relay_sql::mark_failed(schema_),
               {ids.c_str(), "{NULL,NULL,NULL}", "{timeout,too large,HTTP 429}", "1000", "60000",
                "25", "{false,true,false}", "{0,0,3600000}", "{false,false,false}"});
  const std::vector<relay_sql::FailedRow> rows = relay_sql::read_mark_failed(result);
  ASSERT_EQ(rows.size(), 3U);
  EXPECT_EQ(where("event_id = '" + retried +
                  "' AND attempt_count = 1 AND available_at > now()"
                  " AND available_at <= now() + interval '1 s' AND quarantined_at IS NULL"
                  " AND last_error = 'timeout'"),
            1);
  EXPECT_EQ(where("event_id = '" + throttled +
                  "' AND available_at > now() + interval '59 min' AND quarantined_at IS NULL"),
            1)
      << "a Retry-After longer than the backoff wins";
  EXPECT_EQ(where("event_id = '" + poisoned + "' AND quarantined_at IS NOT NULL"), 1);
}

// Fresh untouched rows are the stream's; rows a relay touched (a failure's backoff ran out) and
// rows older than the horizon (from before the slot, or whose mark was lost) are the table's.
TEST_F(RelaySqlStreams, AClaimBelowAHorizonLeavesFreshUntouchedRowsToTheStream) {
  const std::string fresh = insert("o-fresh", 1);
  const std::string old = insert("o-old", 1, "1 min");
  const std::string touched = insert("o-touched", 1);
  pg::exec(conn_.get(),
           "UPDATE " + events_ +
               " SET attempt_count = 1, available_at = now() - interval '1 s' WHERE event_id = $1",
           {touched.c_str()});
  const std::string horizon(
      pg::exec(conn_.get(), "SELECT (now() - interval '5 s')::text").text(0, 0));
  pg::exec(conn_.get(), "BEGIN");
  std::vector<std::string> below = claim(horizon);
  pg::exec(conn_.get(), "ROLLBACK");
  std::sort(below.begin(), below.end());
  std::vector<std::string> expected{old, touched};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(below, expected);

  pg::exec(conn_.get(), "BEGIN");
  const std::vector<std::string> all = claim("infinity");
  pg::exec(conn_.get(), "ROLLBACK");
  EXPECT_EQ(all.size(), 3U) << "a polling relay's claim takes every head";
}

TEST_F(RelaySqlStreams, CheckStreamedNamesEventsWithALowerSequencePending) {
  const std::string x1 = insert("x", 1);
  const std::string x2 = insert("x", 2);
  const std::string y1 = insert("y", 1);
  const std::string y2 = insert("y", 2);
  const std::string z1 = insert("z", 1);
  pg::exec(conn_.get(), "UPDATE " + events_ + " SET published_at = now() WHERE event_id = $1",
           {y1.c_str()});
  // (x,2): x 1 is pending. (y,2): y 1 is published. (z,1) and (x,1): nothing lower. (x,2) once
  // more without asking about lower sequences: nothing to say.
  const std::string ids = "{" + x2 + "," + y2 + "," + z1 + "," + x1 + "," + x2 + "}";
  const auto result = pg::exec(conn_.get(), cdc_sql::check_streamed(schema_),
                               {ids.c_str(), "{order,order,order,order,order}", "{x,y,z,x,x}",
                                "{2,2,1,1,2}", "{t,t,t,t,f}", nullptr});
  const cdc_sql::StreamCheck check = cdc_sql::read_check_streamed(result);
  EXPECT_EQ(check.blocked, std::vector<std::size_t>{0});
  EXPECT_TRUE(check.invisible.empty());
  pg::exec(conn_.get(), "UPDATE " + events_ + " SET skipped_at = now() WHERE event_id = $1",
           {x1.c_str()});
  const std::string x2_only = "{" + x2 + "}";
  const auto after_skip = pg::exec(conn_.get(), cdc_sql::check_streamed(schema_),
                                   {x2_only.c_str(), "{order}", "{x}", "{2}", "{t}", nullptr});
  EXPECT_TRUE(cdc_sql::read_check_streamed(after_skip).blocked.empty())
      << "a skipped row is finished";
}

// A row whose transaction this session does not see committed yet must wait: the stream can
// bring a transaction a moment before other sessions see it (and, under synchronous
// replication, until the standby confirmed it).
TEST_F(RelaySqlStreams, CheckStreamedNamesEventsWhoseRowsAreNotVisibleYet) {
  const std::string seen = insert("a", 1);
  auto writer = connect();
  pg::exec(writer.get(), "BEGIN");
  const std::string unseen(
      pg::exec(writer.get(),
               "INSERT INTO " + events_ +
                   " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                   "  payload) VALUES (gen_random_uuid(), 'order', 'b', 1, 'E', '{}')"
                   " RETURNING event_id::text")
          .text(0, 0));
  const std::string ids = "{" + seen + "," + unseen + "}";
  const cdc_sql::StreamCheck before = cdc_sql::read_check_streamed(
      pg::exec(conn_.get(), cdc_sql::check_streamed(schema_),
               {ids.c_str(), "{order,order}", "{a,b}", "{1,1}", "{f,f}", nullptr}));
  EXPECT_EQ(before.invisible, std::vector<std::size_t>{1});
  EXPECT_TRUE(before.blocked.empty());
  pg::exec(writer.get(), "COMMIT");
  const cdc_sql::StreamCheck after = cdc_sql::read_check_streamed(
      pg::exec(conn_.get(), cdc_sql::check_streamed(schema_),
               {ids.c_str(), "{order,order}", "{a,b}", "{1,1}", "{f,f}", nullptr}));
  EXPECT_TRUE(after.invisible.empty());
}

// A table-less event has no row: it waits until its transaction is visible, as a row would; a
// row with its id is one the relay wrote (materialized), the table's until it is finished.
TEST_F(RelaySqlStreams, CheckStreamedWaitsForATableLessTransactionAndLeavesAWrittenOneToTheTable) {
  auto writer = connect();
  pg::exec(writer.get(), "BEGIN");
  const std::string xid(pg::exec(writer.get(), "SELECT pg_current_xact_id()::text").text(0, 0));
  const std::string rowless = EventId::generate().to_string();
  const std::string ids = "{" + rowless + "}";
  const std::string xids = "{" + xid + "}";
  const auto check = [&] {
    return cdc_sql::read_check_streamed(
        pg::exec(conn_.get(), cdc_sql::check_streamed(schema_),
                 {ids.c_str(), "{order}", "{t}", "{1}", "{f}", xids.c_str()}));
  };
  EXPECT_EQ(check().invisible, std::vector<std::size_t>{0}) << "not committed yet";
  pg::exec(writer.get(), "COMMIT");
  const cdc_sql::StreamCheck visible = check();
  EXPECT_TRUE(visible.invisible.empty() && visible.blocked.empty() && visible.finished.empty())
      << "committed and seen: it goes";

  const std::string written = insert("w", 1);  // as if the relay had written it to the table
  const std::string written_ids = "{" + written + "}";
  const auto check_written = [&] {
    return cdc_sql::read_check_streamed(
        pg::exec(conn_.get(), cdc_sql::check_streamed(schema_),
                 {written_ids.c_str(), "{order}", "{w}", "{1}", "{f}", xids.c_str()}));
  };
  EXPECT_EQ(check_written().blocked, std::vector<std::size_t>{0})
      << "a table-less event with a row is the table's, touched or not";
  pg::exec(conn_.get(), "UPDATE " + events_ + " SET published_at = now() WHERE event_id = $1",
           {written.c_str()});
  EXPECT_EQ(check_written().finished, std::vector<std::size_t>{0});
}

}  // namespace
}  // namespace outbox
