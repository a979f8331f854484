#include "relay/claim_schedule.hpp"

#include <gtest/gtest.h>

namespace outbox::detail {
namespace {

using namespace std::chrono_literals;
using Clock = ClaimSchedule::Clock;

TEST(ClaimSchedule, TheFirstClaimAndLightTrafficAreNeverPaced) {
  const auto t0 = Clock::time_point{} + 1h;
  ClaimSchedule schedule(t0);
  EXPECT_FALSE(schedule.paced(t0));
  schedule.started(t0);
  schedule.finished(ClaimSchedule::kHeavyFrom - 1, false);
  EXPECT_FALSE(schedule.paced(t0 + 1ms)) << "a claim of a few rows: lighter traffic";
}

TEST(ClaimSchedule, AHeavyClaimPacesTheNextUntilTheGapHasPassed) {
  const auto t0 = Clock::time_point{} + 1h;
  ClaimSchedule schedule(t0);
  schedule.started(t0);
  schedule.finished(ClaimSchedule::kHeavyFrom, false);
  EXPECT_TRUE(schedule.paced(t0));
  EXPECT_TRUE(schedule.paced(t0 + ClaimSchedule::kGap - 1us));
  EXPECT_FALSE(schedule.paced(t0 + ClaimSchedule::kGap));
  EXPECT_EQ(schedule.until(t0 + 500us, ClaimSchedule::kGap), 3ms) << "rounded up, never 2 ms";
  EXPECT_EQ(schedule.until(t0 + 2500us, ClaimSchedule::kGap), 1ms)
      << "under a millisecond left is still a wait, not a poll";
}

TEST(ClaimSchedule, ABacklogOrANotifyIsNeverPaced) {
  const auto t0 = Clock::time_point{} + 1h;
  ClaimSchedule schedule(t0);
  schedule.started(t0);
  schedule.finished(500, true);  // a full batch: more rows wait
  EXPECT_FALSE(schedule.paced(t0 + 1ms));
  schedule.started(t0 + 1ms);
  schedule.finished(20, false);
  EXPECT_TRUE(schedule.paced(t0 + 2ms));
  schedule.announced();  // a NOTIFY
  EXPECT_FALSE(schedule.paced(t0 + 2ms));
}

TEST(ClaimSchedule, SaysWhenTheRelaysOwnLookIsDue) {
  const auto t0 = Clock::time_point{} + 1h;
  ClaimSchedule schedule(t0);
  EXPECT_FALSE(schedule.due(t0 + 2ms, 3ms));
  EXPECT_TRUE(schedule.due(t0 + 3ms, 3ms));
  EXPECT_LT(schedule.until(t0 + 5ms, 3ms).count(), 0) << "overdue";
}

}  // namespace
}  // namespace outbox::detail
