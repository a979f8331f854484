#include "relay/cdc/table_sweep.hpp"

#include <gtest/gtest.h>

namespace outbox::detail {
namespace {

using namespace std::chrono_literals;
using Clock = TableSweep::Clock;

TEST(TableSweep, TheFirstSweepMayBeginAtOnce) {
  const TableSweep sweep;
  EXPECT_TRUE(sweep.may_begin(Clock::time_point{} + 1h));
}

TEST(TableSweep, ASweepThatTookNothingHoldsTheNextBackByItsOwnCostTimesTheSpacing) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep;
  // Three claims of one sweep, 20 ms of statements in all, with the stream's work between them.
  sweep.ran(t0, t0 + 5ms, 0, false);
  sweep.ran(t0 + 40ms, t0 + 50ms, 0, false);
  EXPECT_TRUE(sweep.may_begin(t0 + 50ms)) << "the sweep is not over: nothing is held back yet";
  sweep.ran(t0 + 90ms, t0 + 95ms, 0, true);
  const auto held_until = t0 + 95ms + TableSweep::kSpacing * 20ms;
  EXPECT_FALSE(sweep.may_begin(t0 + 95ms));
  EXPECT_FALSE(sweep.may_begin(held_until - 1us));
  EXPECT_TRUE(sweep.may_begin(held_until));
}

TEST(TableSweep, ASweepThatTookSomethingLetsTheNextBeginAtTheUsualPace) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep;
  sweep.ran(t0, t0 + 30ms, 0, false);
  sweep.ran(t0 + 30ms, t0 + 60ms, 3, false);  // one claim took rows: the table has work
  sweep.ran(t0 + 60ms, t0 + 90ms, 0, true);
  EXPECT_TRUE(sweep.may_begin(t0 + 90ms));
}

TEST(TableSweep, EachSweepIsMeasuredOnItsOwn) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep;
  sweep.ran(t0, t0 + 100ms, 2, true);  // took rows: not held back, and its cost is forgotten
  sweep.ran(t0 + 1s, t0 + 1s + 1ms, 0, true);
  EXPECT_TRUE(sweep.may_begin(t0 + 1s + 1ms + TableSweep::kSpacing * 1ms));
  EXPECT_FALSE(sweep.may_begin(t0 + 1s + 1ms + TableSweep::kSpacing * 1ms - 1us))
      << "held back by this sweep's 1 ms alone, not the earlier 100 ms";
}

TEST(TableSweep, ANewStreamMayBeginASweepAtOnce) {
  const auto t0 = Clock::time_point{} + 1h;
  TableSweep sweep;
  sweep.ran(t0, t0 + 1s, 0, true);
  EXPECT_FALSE(sweep.may_begin(t0 + 2s));
  sweep.restart(t0 + 2s);
  EXPECT_TRUE(sweep.may_begin(t0 + 2s));
}

}  // namespace
}  // namespace outbox::detail
