// The admin page's headline (observe/verdict.hpp) and the server's last hour
// (observe/history.hpp): each rule on its own, and the published rate from the counts the relay
// sessions write.

#include "observe/verdict.hpp"

#include <gtest/gtest.h>

#include "observe/history.hpp"
#include "unit/contains.hpp"

namespace outbox::observe {
namespace {

VerdictInput running(double pending = 0) {
  VerdictInput in;
  in.backlog_read = true;
  in.backlog_ok = true;
  in.pending = pending;
  in.sessions.working = 1;
  in.published_last_minute = 100;
  return in;
}

TEST(Verdict, HealthyWhenARelayRunsAndNothingWaitsLong) {
  EXPECT_EQ(judge(running()).state, "healthy");
  EXPECT_EQ(judge(running()).reason, "1 relay(s) running; nothing pending");
  VerdictInput busy = running(40);
  busy.oldest_age = 3;
  EXPECT_EQ(judge(busy).reason, "1 relay(s) running; 40 events pending, the oldest 3 s old");
}

TEST(Verdict, DegradedWhileAConsumerHasParkedEvents) {
  VerdictInput parked = running();
  parked.parked_at_consumers = {{"projection", 3}, {"billing", 0}};
  const Verdict v = judge(parked);
  EXPECT_EQ(v.state, "degraded");
  EXPECT_EQ(v.reason, "3 events parked at consumer projection (outbox inbox list)");
  parked.parked_at_consumers = {{"billing", 0}};
  EXPECT_EQ(judge(parked).state, "healthy") << "a consumer with nothing parked is no reason";
}

TEST(Verdict, StartingUntilTheFirstBacklogRunEnds) {
  VerdictInput none;  // no run yet: not ok, no error
  EXPECT_EQ(judge(none).state, "starting");
  none.backlog_read = true;
  EXPECT_EQ(judge(none).state, "stalled") << "a run ended and did not work";
}

TEST(Verdict, StalledWhenNothingCanMove) {
  VerdictInput unreadable = running();
  unreadable.backlog_ok = false;
  unreadable.backlog_error = "connection refused";
  EXPECT_EQ(judge(unreadable).state, "stalled");
  EXPECT_EQ(judge(unreadable).reason, "the outbox table cannot be read: connection refused");

  VerdictInput stopped = running(1);
  stopped.sessions = {.working = 0, .waiting = 0, .silent = 1};
  stopped.quarantined = 2;
  const Verdict v = judge(stopped);
  EXPECT_EQ(v.state, "stalled");
  EXPECT_EQ(v.reason,
            "1 event pending and no relay running (1 silent: stopped or hung); 2 events "
            "quarantined");

  VerdictInput stuck = running(5);
  stuck.oldest_age = 600;
  stuck.published_last_minute = 0;
  EXPECT_EQ(judge(stuck).state, "stalled");
  EXPECT_TRUE(contains(judge(stuck).reason, "nothing published for a minute"))
      << judge(stuck).reason;
  EXPECT_TRUE(contains(judge(stuck).reason, "10 min")) << judge(stuck).reason;
  stuck.published_last_minute = -1;  // not known yet: not said to be stalled
  EXPECT_EQ(judge(stuck).state, "degraded");
}

TEST(Verdict, DegradedNamesEveryReason) {
  VerdictInput in = running(3);
  in.sessions.silent = 1;
  in.unwell = {"relay r-1: broker_unavailable"};
  in.quarantined = 1;
  in.oldest_age = 90;
  in.unstreamed_slots = {"old_slot"};
  const Verdict v = judge(in);
  EXPECT_EQ(v.state, "degraded");
  EXPECT_EQ(v.reason,
            "1 relay session(s) silent (stopped or hung); relay r-1: broker_unavailable; 1 event "
            "quarantined; the oldest pending event has waited 90 s; slot old_slot is not "
            "streamed and keeps WAL");

  VerdictInput idle;
  idle.backlog_read = true;
  idle.backlog_ok = true;
  EXPECT_EQ(judge(idle).state, "degraded") << "an event written now would wait for a relay";
  EXPECT_EQ(judge(idle).reason, "no relay running (nothing pending yet)");
}

TEST(History, ThePublishedRateComesFromTheGrowthOfEachSessionsCount) {
  History h;
  h.record(1000, 5, 0, 1, {{"a", 500}});  // sets where counting starts: a's 500 are old
  h.record(1020, 4, 0, 1, {{"a", 600}});
  // b is new since the last run: all it published counts; a's row went (the session ended).
  h.record(1040, 3, 1, 2, {{"b", 100}});
  // a session's count going backwards (a row rewritten) is not negative publishing.
  h.record(1060, 3, 1, 2, {{"b", 50}});
  // a's row back (deleted and written again): only its growth counts, not all of it again.
  h.record(1080, 3, 1, 2, {{"a", 610}, {"b", 50}});
  const auto s = h.samples();
  ASSERT_EQ(s.size(), 5U);
  EXPECT_LT(s[0].published_per_second, 0) << "the first sample has nothing to compare with";
  EXPECT_LT(s[1].published_per_second, 0) << "20 s of history: too short to say (heartbeats)";
  EXPECT_DOUBLE_EQ(s[2].published_per_second, 200.0 / 40);
  EXPECT_DOUBLE_EQ(s[3].published_per_second, 200.0 / 60) << "over the minute before";
  EXPECT_DOUBLE_EQ(s[4].published_per_second, 110.0 / 60);
  EXPECT_EQ(s[2].pending, 3);
  EXPECT_EQ(s[2].quarantined, 1);
  EXPECT_EQ(s[2].oldest_age, 2);
}

TEST(History, KeepsOneSamplePerStepForAnHour) {
  History h;
  for (int t = 0; t <= 7200; ++t) h.record(t, t, 0, 0, {});
  const auto s = h.samples();
  // One per 5 s over the last hour: 3600 / 5 + 1.
  ASSERT_EQ(s.size(), 721U);
  EXPECT_EQ(s.front().unix_seconds, 3600);
  EXPECT_EQ(s.back().unix_seconds, 7200);
  EXPECT_DOUBLE_EQ(s.back().published_per_second, 0);
}

}  // namespace
}  // namespace outbox::observe
