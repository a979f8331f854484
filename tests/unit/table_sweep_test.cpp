#include "relay/cdc/table_sweep.hpp"

#include <gtest/gtest.h>

#include "relay/cdc/stream_session.hpp"

namespace outbox::detail {
namespace {

using namespace std::chrono_literals;
using Clock = TableSweep::Clock;
using Claim = TableSweep::Claim;

constexpr auto kLongestHold = 5s;

TEST(TableSweep, TheFirstSweepMayBeginAtOnce) {
  const TableSweep sweep(kLongestHold);
  EXPECT_TRUE(sweep.may_begin(Clock::time_point{} + 1h));
}

TEST(TableSweep, ASweepThatTookNothingHoldsTheNextBackByItsOwnCostTimesTheSpacing) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep(kLongestHold);
  // Three claims of one sweep, 20 ms of statements in all, with the stream's work between them.
  sweep.ran({.started = t0, .ended = t0 + 5ms});
  sweep.ran({.started = t0 + 40ms, .ended = t0 + 50ms});
  EXPECT_TRUE(sweep.may_begin(t0 + 50ms)) << "the sweep is not over: nothing is held back yet";
  sweep.ran({.started = t0 + 90ms, .ended = t0 + 95ms, .last = true});
  const auto held_until = t0 + 95ms + TableSweep::kSpacing * 20ms;
  EXPECT_FALSE(sweep.may_begin(t0 + 95ms));
  EXPECT_FALSE(sweep.may_begin(held_until - 1us));
  EXPECT_TRUE(sweep.may_begin(held_until));
}

TEST(TableSweep, TheHoldIsCappedWhateverTheSweepCost) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep(kLongestHold);
  // A sweep slowed by a lock wait or a paused relay: 60 s, which would otherwise hold 10 min.
  sweep.ran({.started = t0, .ended = t0 + 60s, .last = true});
  EXPECT_FALSE(sweep.may_begin(t0 + 60s + kLongestHold - 1us));
  EXPECT_TRUE(sweep.may_begin(t0 + 60s + kLongestHold));
}

TEST(TableSweep, ASweepThatTookSomethingLetsTheNextBeginAtTheUsualPace) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep(kLongestHold);
  sweep.ran({.started = t0, .ended = t0 + 30ms});
  sweep.ran({.started = t0 + 30ms, .ended = t0 + 60ms, .took = 3});  // the table has work
  sweep.ran({.started = t0 + 60ms, .ended = t0 + 90ms, .last = true});
  EXPECT_TRUE(sweep.may_begin(t0 + 90ms));
}

TEST(TableSweep, ASweepThatCouldTakeTouchedRowsOnlyHoldsNothingBack) {
  // A stream that has not read a commit yet claims touched rows only: finding none says nothing
  // of the rows from before the slot, which the next sweep (with a horizon) must look for.
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep(kLongestHold);
  sweep.ran({.started = t0, .ended = t0 + 100ms, .touched_only = true});
  sweep.ran({.started = t0 + 100ms, .ended = t0 + 200ms, .last = true});
  EXPECT_TRUE(sweep.may_begin(t0 + 200ms));
}

TEST(TableSweep, EachSweepIsMeasuredOnItsOwn) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep(kLongestHold);
  sweep.ran({.started = t0, .ended = t0 + 100ms, .took = 2, .last = true});  // not held back
  sweep.ran({.started = t0 + 1s, .ended = t0 + 1s + 1ms, .last = true});
  EXPECT_TRUE(sweep.may_begin(t0 + 1s + 1ms + TableSweep::kSpacing * 1ms));
  EXPECT_FALSE(sweep.may_begin(t0 + 1s + 1ms + TableSweep::kSpacing * 1ms - 1us))
      << "held back by this sweep's 1 ms alone, not the earlier 100 ms";
}

TEST(TableSweep, ANewStreamSessionMaySweepAtOnce) {
  // CdcSource::reset_session makes a new StreamSession for every new stream (reconnect, restart,
  // witness): a hold from the stream before does not carry over.
  const auto t0 = Clock::time_point{} + 1h;
  StreamSession session(10ms);
  session.sweep.ran({.started = t0, .ended = t0 + 50ms, .last = true});
  EXPECT_FALSE(session.sweep.may_begin(t0 + 60ms));
  EXPECT_FALSE(session.sweep.may_begin(t0 + 50ms + 10 * 10ms - 1us)) << "capped at ten polls";
  session = StreamSession(10ms);
  EXPECT_TRUE(session.sweep.may_begin(t0 + 60ms));
}

}  // namespace
}  // namespace outbox::detail
