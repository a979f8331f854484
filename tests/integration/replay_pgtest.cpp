// outbox replay (outbox/replay.hpp): published events made pending again publish again with the
// same ids in per-aggregate order, ahead of the aggregate's newer events, each one audited; a dry
// run and the filters choose exactly; bad input is named and changes nothing.

#include "outbox/error.hpp"
#include "outbox/replay.hpp"
#include "support/relay_fixture.hpp"
#include "unit/contains.hpp"

namespace outbox::testing {
namespace {

class ReplayTest : public RelayFixture {
 protected:
  static ReplayFilter since_2000() {
    ReplayFilter filter;
    filter.since = "2000-01-01T00:00:00Z";
    return filter;
  }
  long long audited() {
    return count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_operator_audit") +
                             " WHERE action = 'replay' AND actor = 'tester'");
  }
  // The sequences that reached the topic for `key`, in topic order (duplicates included).
  std::vector<long long> sequences_on_topic(const std::string& key, std::size_t messages) {
    const auto read = read_topic_until(
        kafka().bootstrap_servers(), topic_,
        [&](const std::vector<ReadMessage>& so_far) { return so_far.size() >= messages; }, 20s);
    std::vector<long long> sequences;
    for (const auto& m : read) {
      if (m.key == key) sequences.push_back(std::stoll(m.headers.at("aggregate_sequence")));
    }
    return sequences;
  }
};

TEST_F(ReplayTest, PublishedEventsGoAgainWithTheirIdsInOrderAndAreAudited) {
  const auto ids = enqueue(3, 4);
  Relay relay(options("replayer"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  ASSERT_EQ(unpublished(), 0);

  const ReplayPlan all = plan_replay(conn(), schema_, since_2000());
  EXPECT_EQ(all.events, 12);
  EXPECT_EQ(all.aggregates, 3);
  ReplayFilter one = since_2000();
  one.aggregate_id = "agg-1";
  EXPECT_EQ(plan_replay(conn(), schema_, one).events, 4);
  EXPECT_EQ(unpublished(), 0) << "the plan changed something";

  std::vector<std::pair<std::size_t, std::size_t>> progress;
  const auto replayed =
      replay_published(
          conn(), schema_, one, "tester", "rebuild the projection",
          [&](std::size_t done, std::size_t total) { progress.emplace_back(done, total); }, 1)
          .replayed;
  EXPECT_EQ(replayed.size(), 4u);
  EXPECT_EQ(unpublished(), 4);
  EXPECT_EQ(audited(), 4);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), (std::pair<std::size_t, std::size_t>{4, 4}));
  for (const EventId& id : replayed) {
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << "a new id was made";
  }

  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(count_published(conn(), schema_, replayed), 4u);
  EXPECT_EQ(sequences_on_topic("agg-1", 16), (std::vector<long long>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST_F(ReplayTest, AnAggregatesReplayGoesBeforeItsNewerPendingEvent) {
  enqueue(1, 3);
  Relay relay(options("replayer"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  enqueue(1, 1, false, 3);  // sequence 4, pending
  // One event per transaction: the aggregate's three still go back together.
  const auto replayed =
      replay_published(conn(), schema_, since_2000(), "tester", "replay", {}, 1).replayed;
  EXPECT_EQ(replayed.size(), 3u);
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(sequences_on_topic("agg-0", 7), (std::vector<long long>{1, 2, 3, 1, 2, 3, 4}));
}

// A relay holds agg-0's newest event under a lease (in flight): replaying agg-0's published
// events now would put them behind it. The replay leaves agg-0 alone and says so; agg-1 goes.
TEST_F(ReplayTest, AnAggregateWithAnEventInFlightIsLeftAloneAndCounted) {
  enqueue(2, 2);
  Relay relay(options("replayer"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  enqueue(1, 1, false, 2);  // agg-0 #3, pending
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'other-relay:1', claim_until = now() + interval '1 min'"
                       " WHERE aggregate_id = 'agg-0' AND aggregate_sequence = 3");
  const ReplayResult result = replay_published(conn(), schema_, since_2000(), "tester", "replay");
  EXPECT_EQ(result.busy_aggregates, 1u);
  EXPECT_EQ(result.replayed.size(), 2u);  // agg-1's two
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE aggregate_id = 'agg-0' AND published_at IS NULL"),
            1);
}

TEST_F(ReplayTest, PendingSkippedAndOutOfWindowEventsAreNotReplayed) {
  enqueue(2, 1);
  Relay relay(options("replayer"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  enqueue(1, 1, false, 1);  // agg-0 #2: pending
  const std::string events = schema_.table("outbox_events");
  pg::exec(conn(), "UPDATE " + events +
                       " SET skipped_at = now() WHERE aggregate_id = 'agg-1'");  // as skipped
  EXPECT_EQ(plan_replay(conn(), schema_, since_2000()).events, 1);               // agg-0 #1 only
  // A window that can hold nothing is refused, not planned as 0 events: since in the future,
  // until not after since.
  ReplayFilter future = since_2000();
  future.since = "2999-01-01T00:00:00Z";
  try {
    plan_replay(conn(), schema_, future);
    ADD_FAILURE() << "a window starting in the future was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "is in the future")) << e.what();
  }
  ReplayFilter reversed = since_2000();
  reversed.until = "1999-01-01T00:00:00Z";
  EXPECT_THROW(plan_replay(conn(), schema_, reversed), InvalidArgument);
  EXPECT_THROW(replay_published(conn(), schema_, reversed, "tester", "why"), InvalidArgument);
  ReplayFilter before = since_2000();
  before.until = "2001-01-01T00:00:00Z";
  EXPECT_EQ(plan_replay(conn(), schema_, before).events, 0);
  ReplayFilter by_id = since_2000();
  by_id.event_id = EventId::generate();
  EXPECT_EQ(plan_replay(conn(), schema_, by_id).events, 0);
}

TEST_F(ReplayTest, BadInputIsNamedAndChangesNothing) {
  enqueue(1, 2);
  Relay relay(options("replayer"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  ReplayFilter garbage;
  garbage.since = "yesterday at noon-ish";
  try {
    plan_replay(conn(), schema_, garbage);
    ADD_FAILURE() << "a bad timestamp was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "timestamps PostgreSQL reads"));
  }
  EXPECT_THROW(replay_published(conn(), schema_, garbage, "tester", "why"), InvalidArgument);
  EXPECT_THROW(replay_published(conn(), schema_, ReplayFilter{}, "tester", "why"), InvalidArgument);
  // The audit record takes one line of printable text.
  EXPECT_THROW(replay_published(conn(), schema_, since_2000(), "tester", "one\nforged line"),
               InvalidArgument);
  EXPECT_THROW(replay_published(conn(), schema_, since_2000(), "tes\x1b[2Jter", "why"),
               InvalidArgument);
  EXPECT_THROW(replay_published(conn(), schema_, since_2000(), "", "why"), InvalidArgument);
  EXPECT_THROW(replay_published(conn(), schema_, since_2000(), "tester", ""), InvalidArgument);
  pg::exec(conn(), "BEGIN");
  EXPECT_THROW(replay_published(conn(), schema_, since_2000(), "tester", "why"), InvalidArgument);
  pg::exec(conn(), "ROLLBACK");
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(audited(), 0);
}

}  // namespace
}  // namespace outbox::testing
