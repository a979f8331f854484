#include "relay/dead_sessions.hpp"

#include <gtest/gtest.h>

namespace outbox::detail {
namespace {

using namespace std::chrono_literals;
using Clock = DeadSessions::Clock;

TEST(DeadSessions, NothingEndedMeansNoPrefixesAndTheRegularLook) {
  const auto t0 = Clock::time_point{} + 1h;
  DeadSessions sessions(500ms);
  EXPECT_LE(sessions.next_sweep(), t0) << "the first look is due at once";
  EXPECT_TRUE(sessions.update({}, t0).empty());
  EXPECT_EQ(sessions.prefixes(), "{}");
  EXPECT_EQ(sessions.next_sweep(), t0 + 500ms);
}

TEST(DeadSessions, ASessionInItsGraceIsNotTakenOverButLookedAtAgainWhenTheGraceEnds) {
  const auto t0 = Clock::time_point{} + 1h;
  DeadSessions sessions(500ms);
  EXPECT_TRUE(sessions.update({{"r1:00ab", 200.5}}, t0).empty());
  EXPECT_EQ(sessions.prefixes(), "{}");
  EXPECT_EQ(sessions.next_sweep(), t0 + 201ms);
  EXPECT_TRUE(sessions.update({{"r1:00ab", 900}}, t0).empty());
  EXPECT_EQ(sessions.next_sweep(), t0 + 500ms) << "the regular look comes first";
}

TEST(DeadSessions, ADeadSessionIsNamedOnceAndGivesItsPrefixUntilItsRowIsGone) {
  const auto t0 = Clock::time_point{} + 1h;
  DeadSessions sessions(500ms);
  EXPECT_EQ(sessions.update({{"r1:00ab", 0}, {"r2:00cd", 300}}, t0),
            std::vector<std::string>{"r1:00ab"});
  EXPECT_EQ(sessions.prefixes(), "{\"r1:00ab:\"}");
  EXPECT_EQ(sessions.update({{"r1:00ab", -500}, {"r2:00cd", -1}}, t0 + 500ms),
            std::vector<std::string>{"r2:00cd"});
  EXPECT_EQ(sessions.prefixes(), "{\"r1:00ab:\",\"r2:00cd:\"}");
  EXPECT_TRUE(sessions.update({}, t0 + 1s).empty()) << "the rows went: their leases are over";
  EXPECT_EQ(sessions.prefixes(), "{}");
}

}  // namespace
}  // namespace outbox::detail
