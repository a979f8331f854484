// Whether a streamed transaction is visible without asking the table: its 32-bit id (pgoutput's
// Begin) against the full xmin of a recent snapshot, across the 32-bit wraparound.
#include <gtest/gtest.h>

#include <cstdint>

#include "relay/cdc/cdc_sql.hpp"

namespace outbox::cdc_sql {
namespace {

constexpr std::uint64_t kEpoch = std::uint64_t{1} << 32;
const VisibleXmin::Clock::time_point kNow = VisibleXmin::Clock::now();

TEST(VisibleXmin, NothingEndedBeforeTheFirstRefresh) {
  const VisibleXmin xmin;
  EXPECT_FALSE(xmin.ended_before(3, kNow));
  EXPECT_FALSE(xmin.ended_before(4000000000U, kNow));
}

TEST(VisibleXmin, AnIdBelowTheXminEndedAndOneAtOrAboveItMayBeRunning) {
  VisibleXmin xmin;
  xmin.set(5 * kEpoch + 1000, kNow);
  EXPECT_TRUE(xmin.ended_before(999, kNow));
  EXPECT_TRUE(xmin.ended_before(3, kNow));
  EXPECT_FALSE(xmin.ended_before(1000, kNow)) << "the xmin itself was running";
  EXPECT_FALSE(xmin.ended_before(1001, kNow));
}

TEST(VisibleXmin, IdsAcrossTheWraparoundAreReadInTheNearestEpoch) {
  VisibleXmin xmin;
  xmin.set(5 * kEpoch + 100, kNow);  // just after a wraparound
  EXPECT_TRUE(xmin.ended_before(4294967000U, kNow)) << "from the epoch before: ended";
  EXPECT_FALSE(xmin.ended_before(200, kNow));
  xmin.set(5 * kEpoch + 4294967000U, kNow);  // just before one
  EXPECT_FALSE(xmin.ended_before(100, kNow)) << "from the next epoch: newer than xmin";
  EXPECT_TRUE(xmin.ended_before(4294966000U, kNow));
}

// An xmin read long ago would read a new id in the wrong epoch once 2^31 transactions passed:
// it is trusted only for kFresh.
TEST(VisibleXmin, AnXminOlderThanASecondTellsNothing) {
  VisibleXmin xmin;
  xmin.set(5 * kEpoch + 1000, kNow);
  EXPECT_TRUE(xmin.ended_before(999, kNow + std::chrono::milliseconds(900)));
  EXPECT_FALSE(xmin.ended_before(999, kNow + VisibleXmin::kFresh));
}

TEST(VisibleXmin, InTheFirstEpochNothingIsReadAsFromBeforeIt) {
  VisibleXmin xmin;
  xmin.set(1000, kNow);
  EXPECT_FALSE(xmin.ended_before(4294967000U, kNow)) << "no epoch before the first: a newer id";
  EXPECT_TRUE(xmin.ended_before(500, kNow));
}

}  // namespace
}  // namespace outbox::cdc_sql
