// Whether a streamed transaction is visible without asking the table: its 32-bit id (pgoutput's
// Begin) against the full xmin of a recent snapshot, across the 32-bit wraparound.
#include <gtest/gtest.h>

#include <cstdint>

#include "relay/cdc/cdc_sql.hpp"

namespace outbox::cdc_sql {
namespace {

constexpr std::uint64_t kEpoch = std::uint64_t{1} << 32;

TEST(VisibleXmin, NothingEndedBeforeTheFirstRefresh) {
  const VisibleXmin xmin;
  EXPECT_FALSE(xmin.ended_before(3));
  EXPECT_FALSE(xmin.ended_before(4000000000U));
}

TEST(VisibleXmin, AnIdBelowTheXminEndedAndOneAtOrAboveItMayBeRunning) {
  VisibleXmin xmin;
  xmin.set(5 * kEpoch + 1000);
  EXPECT_TRUE(xmin.ended_before(999));
  EXPECT_TRUE(xmin.ended_before(3));
  EXPECT_FALSE(xmin.ended_before(1000)) << "the xmin itself was running";
  EXPECT_FALSE(xmin.ended_before(1001));
}

TEST(VisibleXmin, IdsAcrossTheWraparoundAreReadInTheNearestEpoch) {
  VisibleXmin xmin;
  xmin.set(5 * kEpoch + 100);  // just after a wraparound
  EXPECT_TRUE(xmin.ended_before(4294967000U)) << "from the epoch before: ended";
  EXPECT_FALSE(xmin.ended_before(200));
  xmin.set(5 * kEpoch + 4294967000U);  // just before one
  EXPECT_FALSE(xmin.ended_before(100)) << "from the next epoch: newer than xmin";
  EXPECT_TRUE(xmin.ended_before(4294966000U));
}

TEST(VisibleXmin, InTheFirstEpochNothingIsReadAsFromBeforeIt) {
  VisibleXmin xmin;
  xmin.set(1000);
  EXPECT_FALSE(xmin.ended_before(4294967000U)) << "no epoch before the first: a newer id";
  EXPECT_TRUE(xmin.ended_before(500));
}

}  // namespace
}  // namespace outbox::cdc_sql
