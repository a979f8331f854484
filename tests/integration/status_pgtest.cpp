// What `outbox status` and the admin page read of a schema (outbox/status.hpp): each state of an
// event counted once, and the relay sessions with what they are doing.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "outbox/discard_sink.hpp"
#include "outbox/status.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class StatusTest : public RelayFixture {
 protected:
  // Puts the events of aggregate agg-<a> into a state.
  void set(int aggregate, const std::string& assignment) {
    pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") + " SET " + assignment +
                         " WHERE aggregate_id = 'agg-" + std::to_string(aggregate) + "'");
  }
};

TEST_F(StatusTest, CountsEachStateOnceAndNamesWhatEachRelaySessionDoes) {
  enqueue(6, 2);
  set(0, "published_at = now()");
  set(1, "skipped_at = now()");
  set(2, "claimed_by = 'r:x:1', claim_until = now() + interval '1 h'");
  set(3, "attempt_count = 2");
  set(4, "quarantined_at = now(), attempt_count = 25, available_at = 'infinity'");
  // agg-5 stays pending, due for an hour: the oldest
  set(5, "occurred_at = now() - interval '1 hour', available_at = now() - interval '1 hour'");
  OutboxStatus s = read_status(conn(), schema_);
  EXPECT_EQ(s.pending, 6) << "quarantined events are counted apart, as the gauges count them";
  EXPECT_EQ(s.in_flight, 2);
  EXPECT_EQ(s.retrying, 2) << "tried before and not quarantined";
  EXPECT_EQ(s.quarantined, 2);
  EXPECT_EQ(s.published, 2);
  EXPECT_EQ(s.skipped, 2);
  EXPECT_GE(s.oldest_pending_seconds, 3600);
  EXPECT_LT(s.oldest_pending_seconds, 3700);
  EXPECT_TRUE(s.slots.empty()) << "no change-data-capture relay here";
  EXPECT_TRUE(s.relays.empty());

  Relay relay(options("status-relay"), make_discard_sink());
  std::thread running([&] { relay.run(); });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (s.relays.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    s = read_status(conn(), schema_);
  }
  ASSERT_EQ(s.relays.size(), 1U) << "the running relay's session";
  EXPECT_EQ(s.relays[0].relay_id.rfind("status-relay", 0), 0U) << s.relays[0].relay_id;
  EXPECT_FALSE(s.relays[0].ended);
  EXPECT_LT(s.relays[0].seen_seconds_ago, 30);
  EXPECT_TRUE(s.relays[0].state() == "working" || s.relays[0].state() == "waiting for work")
      << s.relays[0].state();
  relay.request_stop();
  running.join();
  EXPECT_TRUE(read_relay_sessions(conn(), schema_, 10).empty()) << "a relay that stops leaves";

  // What the table holds of sessions that did not leave: one that ended (its claims still
  // leased), one that stalled.
  const std::string relays = schema_.table("outbox_relays");
  pg::exec(conn(), "INSERT INTO " + relays +
                       " (relay_id, lock_key, backend_pid, listening, seen_at, ended_at)"
                       " VALUES ('gone', 1, 1, false, '-infinity', now()),"
                       " ('stalled', 2, 2, true, now() - interval '5 minutes', NULL)");
  const std::vector<RelaySessionStatus> table = read_relay_sessions(conn(), schema_, 10);
  ASSERT_EQ(table.size(), 2U);
  EXPECT_EQ(table[0].relay_id, "stalled") << "newest first";
  EXPECT_EQ(table[0].state(), "silent") << "not seen for 5 minutes: " << table[0].seen_seconds_ago;
  EXPECT_EQ(table[1].state(), "ended");
  EXPECT_TRUE(table[1].ended);
  EXPECT_EQ(table[1].seen_seconds_ago, -1);
  EXPECT_EQ(read_relay_sessions(conn(), schema_, 1).size(), 1U) << "the limit holds";
  EXPECT_EQ(table[0].slot_role(), "") << "a polling relay has no slot";
  EXPECT_EQ(table[0].published, 0);
  EXPECT_EQ(table[0].health, "") << "a row no heartbeat of this build wrote says nothing";

  // A schema not migrated to 17 yet (this build's status and admin before `outbox migrate`):
  // read, with no counts and no health, instead of failing on a missing column.
  pg::exec(conn(), "ALTER TABLE " + relays + " DROP COLUMN published, DROP COLUMN health");
  const std::vector<RelaySessionStatus> older = read_relay_sessions(conn(), schema_, 10);
  ASSERT_EQ(older.size(), 2U);
  EXPECT_EQ(older[0].published, 0);
  EXPECT_EQ(older[0].health, "");

  // A row is the relay's word: one that says it streams a slot whose walsender is another (or
  // none) is not named as streaming it, and a standby or released slot is said as such.
  pg::exec(conn(), "INSERT INTO " + relays +
                       " (relay_id, lock_key, backend_pid, listening, slot_name, slot_mode,"
                       "  walsender_pid) VALUES"
                       " ('liar', 3, 3, false, 'no_such_slot', 'streaming', pg_backend_pid()),"
                       " ('waiting', 4, 4, false, 'some_slot', 'standby', NULL),"
                       " ('over-budget', 5, 5, false, 'some_slot', 'released', NULL)");
  for (const RelaySessionStatus& session : read_relay_sessions(conn(), schema_, 10)) {
    if (session.relay_id == "liar") {
      EXPECT_FALSE(session.slot_streamed);
      EXPECT_EQ(session.slot_role(),
                "says it streams slot no_such_slot, but pg_replication_slots disagrees");
    } else if (session.relay_id == "waiting") {
      EXPECT_EQ(session.slot_role(), "standby for slot some_slot");
    } else if (session.relay_id == "over-budget") {
      EXPECT_EQ(session.slot_role(), "let slot some_slot go, publishes from the table");
    }
  }
  EXPECT_THROW(pg::exec(conn(), "UPDATE " + relays + " SET slot_mode = 'other'"), DatabaseError)
      << "the modes are the three the relay writes";
  EXPECT_THROW(read_relay_sessions(conn(), schema_, -1), InvalidArgument);
}

}  // namespace
}  // namespace outbox::testing
