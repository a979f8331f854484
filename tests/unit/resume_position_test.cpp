// Where a change-data-capture stream starts (relay/cdc/resume_position.hpp) and the typed
// statement parameters (pg/params.hpp): pure, no PostgreSQL.
#include "relay/cdc/resume_position.hpp"

#include <gtest/gtest.h>

#include "pg/params.hpp"

namespace outbox::detail {
namespace {

using namespace std::chrono_literals;

cdc::SystemIdentity server(const char* system, std::uint32_t timeline) {
  cdc::SystemIdentity identity;
  identity.system_id = system;
  identity.timeline = timeline;
  return identity;
}

TEST(ResumePosition, StartsWhereItConfirmedOnlyOnTheSameServerAndTimeline) {
  ResumePosition position;
  EXPECT_EQ(position.start_from(server("7", 1)), 0U) << "nothing confirmed: the slot's";
  position.confirmed(server("7", 1), 1000);
  EXPECT_EQ(position.start_from(server("7", 1)), 1000U);
  EXPECT_EQ(position.start_from(server("8", 1)), 0U) << "another system";
  EXPECT_EQ(position.start_from(server("7", 2)), 0U) << "another timeline";
}

TEST(ResumePosition, KeepsTheFurthestUnlessTheServerChanged) {
  ResumePosition position;
  position.confirmed(server("7", 1), 1000);
  position.confirmed(server("7", 1), 900);
  EXPECT_EQ(position.start_from(server("7", 1)), 1000U);
  position.confirmed(server("7", 2), 500);
  EXPECT_EQ(position.start_from(server("7", 2)), 500U) << "a new timeline replaces it, lower";
  EXPECT_EQ(position.start_from(server("7", 1)), 0U);
}

TEST(ResumePosition, ASavedPositionReadsBackOrIsTheSlots) {
  EXPECT_EQ(ResumePosition::start_from_saved(""), 0U);
  EXPECT_EQ(ResumePosition::start_from_saved("0/16B3748"), 0x16B3748U);
  EXPECT_EQ(ResumePosition::start_from_saved("1/0"), 0x100000000U);
  EXPECT_EQ(ResumePosition::start_from_saved("garbage"), 0U);
}

TEST(ResumePosition, SavesFurtherPositionsAtMostEverySaveInterval) {
  ResumePosition position;
  const auto t0 = ResumePosition::Clock::time_point{} + 100s;
  EXPECT_TRUE(position.save_due(10, t0));
  position.saved(10, t0);
  EXPECT_FALSE(position.save_due(10, t0 + 2s)) << "not further";
  EXPECT_FALSE(position.save_due(20, t0 + ResumePosition::kSaveEvery - 1ms)) << "too soon";
  EXPECT_TRUE(position.save_due(20, t0 + ResumePosition::kSaveEvery));
}

TEST(PgParams, EveryKindAsText) {
  pg::ArrayLiteral array;
  array.add("a,b");
  pg::Params params;
  params.text("slot").integer(-42).boolean(true).boolean(false).null().array(array);
  const std::vector<const char*>& pointers = params.pointers();
  ASSERT_EQ(pointers.size(), 6U);
  EXPECT_STREQ(pointers[0], "slot");
  EXPECT_STREQ(pointers[1], "-42");
  EXPECT_STREQ(pointers[2], "true");
  EXPECT_STREQ(pointers[3], "false");
  EXPECT_EQ(pointers[4], nullptr);
  EXPECT_STREQ(pointers[5], "{\"a,b\"}");
}

TEST(PgParams, PointersStayValidAsMoreAreAdded) {
  pg::Params params;
  params.text("first");
  const char* first = params.pointers()[0];
  for (int i = 0; i < 100; ++i) params.integer(i);
  EXPECT_EQ(params.pointers()[0], first);
  EXPECT_STREQ(first, "first");
  EXPECT_STREQ(params.pointers()[100], "99");
}

}  // namespace
}  // namespace outbox::detail
