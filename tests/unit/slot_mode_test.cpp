// The change-data-capture relay's slot modes and their transitions (relay/cdc/slot_mode.hpp):
// pure, no PostgreSQL.
#include "relay/cdc/slot_mode.hpp"

#include <gtest/gtest.h>

namespace outbox::detail {
namespace {

using namespace std::chrono_literals;
using namespace slot_mode;
using cdc::SlotState;

const Clock::time_point kT0 = Clock::time_point{} + 1000s;

Released released_clear(Clock::time_point since = kT0) {
  Released released = release(ClaimHorizon::before(5), 0, since);
  released.streamed_out = false;
  released.table_caught_up = true;
  return released;
}

TEST(ClaimHorizon, AsTheClaimsParameter) {
  EXPECT_EQ(ClaimHorizon::everything().sql_text(), "infinity");
  EXPECT_EQ(ClaimHorizon::touched_only().sql_text(), "-infinity");
  EXPECT_EQ(ClaimHorizon::before(0).sql_text(), "2000-01-01 00:00:00.000000+00");
  EXPECT_EQ(ClaimHorizon::before(-1).sql_text(), "1999-12-31 23:59:59.999999+00");
  EXPECT_NE(ClaimHorizon::before(1), ClaimHorizon::before(2));
}

TEST(SlotMode, FlagsAndPollingFollowTheMode) {
  EXPECT_EQ(flags(Streaming{}), (Flags{false, false}));
  EXPECT_EQ(flags(Standby{kT0}), (Flags{false, true}));
  EXPECT_EQ(flags(release(ClaimHorizon::touched_only(), 0, kT0)), (Flags{true, false}));
  EXPECT_FALSE(polling(Streaming{}));
  EXPECT_TRUE(polling(Standby{kT0}));
  EXPECT_TRUE(polling(Released{}));
  // The names outbox_relays.slot_mode accepts (migration 15's CHECK): `outbox status` reads them.
  EXPECT_EQ(name(Streaming{}), "streaming");
  EXPECT_EQ(name(Standby{kT0}), "standby");
  EXPECT_EQ(name(Released{}), "released");
}

TEST(SlotMode, AStandbyClaimsTouchedRowsOnly) {
  EXPECT_EQ(table_horizon(Standby{kT0}), ClaimHorizon::touched_only());
}

TEST(SlotMode, ReleasedKeepsTheStreamsHorizonWhileStreamedEventsAreOut) {
  const Released released = release(ClaimHorizon::before(42), 7, kT0);
  EXPECT_EQ(released.since, kT0);
  EXPECT_TRUE(released.streamed_out);
  EXPECT_FALSE(released.table_caught_up);
  EXPECT_EQ(released.walsender, 7);
  EXPECT_FALSE(released.slot_taken);
  SlotMode mode = released;
  EXPECT_EQ(table_horizon(mode), ClaimHorizon::before(42));
  EXPECT_TRUE(streamed_out(mode));
  EXPECT_TRUE(nothing_streamed_out(mode));
  EXPECT_FALSE(nothing_streamed_out(mode)) << "news once";
  EXPECT_EQ(table_horizon(mode), ClaimHorizon::everything());
  std::get<Released>(mode).slot_taken = true;
  EXPECT_EQ(table_horizon(mode), ClaimHorizon::touched_only()) << "another relay streams now";
}

TEST(SlotMode, NothingStreamedOutForgetsThatTheTableCaughtUp) {
  SlotMode mode = release(ClaimHorizon::before(42), 0, kT0);
  table_claimed(mode, true, false, 3, 5);
  EXPECT_TRUE(std::get<Released>(mode).table_caught_up);
  nothing_streamed_out(mode);
  EXPECT_FALSE(std::get<Released>(mode).table_caught_up) << "its claims stopped at the old horizon";
  SlotMode streaming = Streaming{};
  EXPECT_FALSE(nothing_streamed_out(streaming));
}

TEST(SlotMode, TheTableCaughtUpOnlyWhenAClaimFoundEveryReadyRow) {
  SlotMode mode = released_clear();
  const auto caught_up = [&](bool end, bool mid_way, std::size_t got, std::size_t limit) {
    table_claimed(mode, end, mid_way, got, limit);
    return std::get<Released>(mode).table_caught_up;
  };
  EXPECT_TRUE(caught_up(true, false, 3, 5));
  EXPECT_FALSE(caught_up(true, true, 3, 5)) << "began mid-way";
  EXPECT_FALSE(caught_up(true, false, 5, 5)) << "a full batch";
  EXPECT_FALSE(caught_up(false, false, 0, 5)) << "not at the end";
}

TEST(SlotMode, StreamHorizonFollowsTheCertainPosition) {
  EXPECT_EQ(certain_position(0, 0, 0), 0);
  EXPECT_EQ(stream_horizon(0, 1s), ClaimHorizon::touched_only()) << "nothing read yet";
  EXPECT_EQ(certain_position(5'000'000, 3, 9'000'000), 5'000'000)
      << "a probe waits for open events";
  EXPECT_EQ(certain_position(5'000'000, 0, 9'000'000), 9'000'000);
  EXPECT_EQ(certain_position(5'000'000, 0, 1'000'000), 5'000'000) << "never backwards";
  EXPECT_EQ(stream_horizon(9'000'000, 1s), ClaimHorizon::before(8'000'000));
}

TEST(SlotMode, EnteringStandbyAnnouncesOnlyAChange) {
  const Entered first = enter_standby(Streaming{}, kT0);
  EXPECT_TRUE(first.announce);
  EXPECT_EQ(first.mode.since, kT0);
  EXPECT_TRUE(first.mode.slot_taken);
  EXPECT_FALSE(enter_standby(first.mode, kT0 + 1s).announce);
}

TEST(SlotMode, AReleasedRelaysOwnWalsenderIsNotAnotherRelay) {
  SlotMode mode = release(ClaimHorizon::touched_only(), 42, kT0);
  const Next next = slot_seen(mode, {SlotState::active, 0}, kT0 + 10s, 0s);
  EXPECT_EQ(next, (Next{Next::Step::wait, false}));
  EXPECT_FALSE(std::get<Released>(mode).slot_taken);
  walsender_gone(mode);
  EXPECT_EQ(walsender(mode), 0);
  EXPECT_EQ(slot_seen(mode, {SlotState::active, 0}, kT0 + 10s, 0s), (Next{Next::Step::wait, true}))
      << "taken by another relay: the horizon changes";
  EXPECT_TRUE(std::get<Released>(mode).slot_taken);
  EXPECT_EQ(slot_seen(mode, {SlotState::inactive, 0}, kT0 + 10s, 0s).horizon_changed, true);
}

TEST(SlotMode, ReleasedStreamsAgainOnlyWhenEverythingIsDone) {
  const auto step = [](Released released, SlotState state, Clock::duration after,
                       Clock::duration grace, std::int64_t writers = 0) {
    SlotMode mode = released;
    return slot_seen(mode, {state, writers}, released.since + after, grace).step;
  };
  EXPECT_EQ(step(released_clear(), SlotState::inactive, 1s, 0s), Next::Step::try_stream);
  EXPECT_EQ(step(released_clear(), SlotState::missing, 1s, 0s), Next::Step::try_stream);
  EXPECT_EQ(step(released_clear(), SlotState::active, 10s, 0s), Next::Step::wait);
  Released out = released_clear();
  out.streamed_out = true;
  EXPECT_EQ(step(out, SlotState::inactive, 10s, 0s), Next::Step::wait);
  Released behind = released_clear();
  behind.table_caught_up = false;
  EXPECT_EQ(step(behind, SlotState::inactive, 10s, 0s), Next::Step::wait);
  Released exiting = released_clear();
  exiting.walsender = 9;
  EXPECT_EQ(step(exiting, SlotState::inactive, 10s, 0s), Next::Step::wait);
  EXPECT_EQ(step(released_clear(), SlotState::inactive, 900ms, 0s), Next::Step::wait)
      << "at least a second";
  EXPECT_EQ(step(released_clear(), SlotState::inactive, 5s, 10s), Next::Step::wait)
      << "the horizon grace";
  EXPECT_EQ(step(released_clear(), SlotState::inactive, 10s, 10s), Next::Step::try_stream);
  EXPECT_EQ(step(released_clear(), SlotState::missing, 10s, 0s, 2), Next::Step::wait_for_writers);
  EXPECT_EQ(step(released_clear(), SlotState::inactive, 10s, 0s, 2), Next::Step::try_stream)
      << "only creating a slot waits for writers";
}

TEST(SlotMode, AStandbyStreamsAsSoonAsTheSlotIsFree) {
  SlotMode mode = Standby{kT0};
  EXPECT_EQ(slot_seen(mode, {SlotState::active, 0}, kT0, 10s), (Next{Next::Step::wait, false}));
  EXPECT_EQ(slot_seen(mode, {SlotState::missing, 2}, kT0, 10s),
            (Next{Next::Step::try_stream, true}))
      << "no grace and no wait for writers: no relay would create it otherwise";
  EXPECT_FALSE(std::get<Standby>(mode).slot_taken);
  EXPECT_EQ(slot_seen(mode, {SlotState::inactive, 0}, kT0, 10s).step, Next::Step::try_stream);
}

TEST(SlotMode, AFailedTryWaitsTheGraceAgain) {
  SlotMode mode = released_clear(kT0);
  stream_try_failed(mode, kT0 + 7s);
  EXPECT_EQ(std::get<Released>(mode).since, kT0 + 7s);
  SlotMode standby = Standby{kT0};
  stream_try_failed(standby, kT0 + 7s);
  EXPECT_EQ(std::get<Standby>(standby).since, kT0);
  SlotMode streaming = Streaming{};
  EXPECT_EQ(slot_seen(streaming, {SlotState::inactive, 0}, kT0, 0s).step, Next::Step::wait);
}

}  // namespace
}  // namespace outbox::detail
