// Retention: what cleanup deletes, what it never deletes, and a crash in the middle of a batch.

#include <gtest/gtest.h>

#include "common/fault.hpp"
#include "outbox/cleanup.hpp"
#include "outbox/inbox.hpp"
#include "pg/array_literal.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class CleanupTest : public RelayFixture {
 protected:
  void TearDown() override { fault::arm(""); }

  std::string events() const { return schema_.table("outbox_events"); }

  // Puts the events of aggregate agg-<a> (sequence `from` onwards) into a state.
  void set(int aggregate, const std::string& assignment, int from = 1) {
    pg::exec(conn(), "UPDATE " + events() + " SET " + assignment + " WHERE aggregate_id = 'agg-" +
                         std::to_string(aggregate) +
                         "' AND aggregate_sequence >= " + std::to_string(from));
  }
  long long remaining(int aggregate) {
    return count(conn(), "SELECT count(*) FROM " + events() + " WHERE aggregate_id = 'agg-" +
                             std::to_string(aggregate) + "'");
  }

  CleanupOptions options(std::chrono::milliseconds retention) {
    CleanupOptions o;
    o.schema = schema_;
    o.retention = retention;
    o.batch_size = 3;  // many batches
    return o;
  }

  // Six aggregates of four events, one state each.
  void six_kinds_of_event() {
    enqueue(6, 4);
    set(0, "published_at = now() - interval '2 hours'");                   // due
    set(1, "skipped_at = now() - interval '2 hours'");                     // due
    set(2, "published_at = now() - interval '10 minutes'");                // inside the horizon
    set(3, "claimed_by = 'r:x:1', claim_until = now() + interval '1 h'");  // in flight
    set(4,
        "quarantined_at = now() - interval '2 hours', attempt_count = 25,"
        " available_at = 'infinity'");  // quarantined: pending for good
    // agg-5 stays pending; its first two were published long ago
    set(5, "published_at = now() - interval '2 hours'");
    set(5, "published_at = NULL", 3);
  }
};

TEST_F(CleanupTest, DeletesOnlyEventsFinishedBeforeTheRetention) {
  six_kinds_of_event();
  const CleanupReport report = cleanup(conn(), options(std::chrono::hours(1)));
  EXPECT_EQ(report.events_deleted, 4U + 4U + 2U);
  EXPECT_GE(report.batches, 8U) << "24 rows, 3 per batch";
  EXPECT_EQ(remaining(0), 0);
  EXPECT_EQ(remaining(1), 0);
  EXPECT_EQ(remaining(2), 4) << "published inside the replay horizon";
  EXPECT_EQ(remaining(3), 4) << "in flight";
  EXPECT_EQ(remaining(4), 4) << "quarantined";
  EXPECT_EQ(remaining(5), 2) << "pending";
  EXPECT_EQ(unpublished(), 4 + 4 + 2);
  // Sequences live in their own table: an aggregate whose events were all deleted goes on.
  const Producer producer(ProducerOptions{schema_, 4096});
  pg::exec(conn(), "BEGIN");
  const auto next =
      producer.enqueue(conn(), NewEvent{"order", "agg-0", "Step", "{}", "{}", 1, std::nullopt});
  pg::commit(conn());
  EXPECT_EQ(next.aggregate_sequence, 5);
}

TEST_F(CleanupTest, ADryRunCountsAndDeletesNothing) {
  six_kinds_of_event();
  auto o = options(std::chrono::hours(1));
  o.dry_run = true;
  EXPECT_EQ(cleanup(conn(), o).events_deleted, 10U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + events()), 24);
}

// A crash between a batch's DELETE and its COMMIT (the FAULTS.md row "cleanup: mid-batch") rolls
// that batch back whole; batches before it stay done; a rerun finishes. Nothing pending is touched.
TEST_F(CleanupTest, ACrashMidBatchRollsBackThatBatchOnly) {
  enqueue(4, 3);  // 12 events; event ids ascend with insertion
  pg::exec(conn(), "UPDATE " + events() + " SET published_at = now() - interval '1 day'");
  set(3, "published_at = NULL");  // agg-3 pending
  auto o = options(std::chrono::hours(1));
  o.batch_size = 4;
  fault::arm("cleanup.mid_batch=error@2");
  EXPECT_THROW(cleanup(conn(), o), Error);
  fault::arm("");
  // Each transaction enqueued one event per aggregate: the first batch held sequence 1 of all
  // four aggregates (three due), the second batch was rolled back.
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + events()), 12 - 3);
  EXPECT_EQ(unpublished(), 3);
  EXPECT_EQ(PQtransactionStatus(conn()), PQTRANS_IDLE) << "the failed batch was rolled back";
  const CleanupReport rerun = cleanup(conn(), o);
  EXPECT_EQ(rerun.events_deleted, 6U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + events()), 3);
  EXPECT_EQ(unpublished(), 3);
}

TEST_F(CleanupTest, InboxIdsGoOnlyWhenOlderThanTheirOwnRetention) {
  const Inbox inbox(schema_, "projection");
  std::vector<EventId> ids;
  for (int i = 0; i < 7; ++i) {
    ids.push_back(EventId::generate());
    inbox.process(conn(), ids.back(), [](PGconn*) {});
  }
  const std::string inbox_table = schema_.table("processed_events");
  pg::exec(conn(),
           "UPDATE " + inbox_table +
               " SET processed_at = now() - interval '40 days' WHERE event_id = ANY ($1)",
           {pg::uuid_array(std::vector<EventId>{ids[0], ids[3], ids[6]}).c_str()});
  // A second consumer's ids, all old: the walk crosses from one consumer name to the next.
  const Inbox audit(schema_, "audit");
  for (int i = 0; i < 4; ++i) audit.process(conn(), EventId::generate(), [](PGconn*) {});
  pg::exec(conn(),
           "UPDATE " + inbox_table +
               " SET processed_at = now() - interval '40 days' WHERE consumer_name = 'audit'");
  auto o = options(std::chrono::hours(24 * 7));
  o.inbox_retention = std::chrono::hours(24 * 30);
  const CleanupReport report = cleanup(conn(), o);
  EXPECT_EQ(report.inbox_deleted, 3U + 4U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + inbox_table), 4);
  // A deleted id is forgotten: that is why the inbox must outlive the replay horizon.
  EXPECT_EQ(inbox.process(conn(), ids[1], [](PGconn*) {}), InboxResult::duplicate);
  EXPECT_EQ(inbox.process(conn(), ids[0], [](PGconn*) {}), InboxResult::applied);
}

// An inbox consumer of this database that applied nothing since before the cutoff is named (it
// may be stopped at an offset gap and miss the events deleted now); one that is current is not.
TEST_F(CleanupTest, WarnsOfAnInboxConsumerThatAppliedNothingSinceTheCutoff) {
  six_kinds_of_event();
  const Inbox stalled(schema_, "stalled");
  const Inbox current(schema_, "current");
  stalled.process(conn(), EventId::generate(), [](PGconn*) {});
  current.process(conn(), EventId::generate(), [](PGconn*) {});
  pg::exec(conn(), "UPDATE " + schema_.table("processed_events") +
                       " SET processed_at = '2026-01-02 03:04:05+00' WHERE consumer_name = "
                       "'stalled'");
  for (const bool dry_run : {true, false}) {
    auto o = options(std::chrono::hours(1));
    o.dry_run = dry_run;
    const CleanupReport report = cleanup(conn(), o);
    ASSERT_EQ(report.consumers_behind.size(), 1U);
    EXPECT_EQ(report.consumers_behind[0].consumer, "stalled");
    EXPECT_NE(report.consumers_behind[0].last_applied_at.find("2026-01-02"), std::string::npos);
    EXPECT_EQ(report.events_deleted, 10U) << "it warns; it does not hold rows back";
  }
}

TEST_F(CleanupTest, RefusesOptionsThatWouldLoseDedupOrMisuseTheConnection) {
  enqueue(1, 2);
  pg::exec(conn(), "UPDATE " + events() + " SET published_at = now() - interval '1 day'");
  auto o = options(std::chrono::hours(1));
  o.inbox_retention = std::chrono::minutes(30);
  try {
    cleanup(conn(), o);
    ADD_FAILURE() << "an inbox retention shorter than the event retention was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("applied twice"), std::string::npos) << e.what();
  }
  o.inbox_retention.reset();
  o.batch_size = 0;
  EXPECT_THROW(cleanup(conn(), o), InvalidArgument);
  o.batch_size = 10;
  pg::exec(conn(), "BEGIN");
  EXPECT_THROW(cleanup(conn(), o), InvalidArgument);
  pg::exec(conn(), "ROLLBACK");
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + events()), 2) << "refused means untouched";
}

}  // namespace
}  // namespace outbox::testing
