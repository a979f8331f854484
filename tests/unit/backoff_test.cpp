// The one retry pacing (common/backoff.hpp): equal jitter, doubling to a cap, reset, a wait that
// notices a stop request.

#include "common/backoff.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

namespace outbox::detail {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, EachWaitIsHalfTheDelayPlusUpToTheOtherHalfAndTheDelayDoublesToTheCap) {
  Backoff backoff(milliseconds(100), milliseconds(1000), 42);
  const milliseconds expected_delays[] = {milliseconds(100),  milliseconds(200),
                                          milliseconds(400),  milliseconds(800),
                                          milliseconds(1000), milliseconds(1000)};
  for (const milliseconds delay : expected_delays) {
    EXPECT_EQ(backoff.delay(), delay);
    const milliseconds wait = backoff.next();
    EXPECT_GE(wait, delay / 2);
    EXPECT_LE(wait, delay);
  }
}

TEST(Backoff, TheJitterSpreadsWaitsOverTheWholeUpperHalf) {
  Backoff backoff(milliseconds(1000), milliseconds(1000), 7);
  milliseconds lowest = milliseconds::max();
  milliseconds highest = milliseconds::zero();
  for (int i = 0; i < 2000; ++i) {
    const milliseconds wait = backoff.next();
    lowest = std::min(lowest, wait);
    highest = std::max(highest, wait);
  }
  EXPECT_LT(lowest, milliseconds(520)) << "never near half the delay: no jitter";
  EXPECT_GT(highest, milliseconds(980)) << "never near the whole delay";
}

TEST(Backoff, TwoLoopsCutOffTogetherDoNotRetryInLockstep) {
  Backoff a(milliseconds(1000), milliseconds(1000), 1);
  Backoff b(milliseconds(1000), milliseconds(1000), 2);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a.next() == b.next() ? 1 : 0;
  EXPECT_LT(same, 10);
}

TEST(Backoff, ResetReturnsToTheBase) {
  Backoff backoff(milliseconds(10), milliseconds(10000), 3);
  for (int i = 0; i < 8; ++i) backoff.next();
  EXPECT_EQ(backoff.delay(), milliseconds(2560));
  backoff.reset();
  EXPECT_EQ(backoff.delay(), milliseconds(10));
}

TEST(Backoff, ACapBelowTheBaseIsTheBase) {
  Backoff backoff(milliseconds(50), milliseconds(10), 3);
  backoff.next();
  EXPECT_EQ(backoff.delay(), milliseconds(50));
}

TEST(Backoff, WaitReturnsSoonAfterAStopRequest) {
  Backoff backoff(milliseconds(60000), milliseconds(60000), 5);
  std::atomic<int> slices{0};
  const auto started = std::chrono::steady_clock::now();
  const bool waited_it_out = backoff.wait([&] { return slices.load() >= 3; },
                                          [&](milliseconds step) {
                                            EXPECT_LE(step, milliseconds(20));
                                            ++slices;
                                          });
  EXPECT_FALSE(waited_it_out);
  EXPECT_EQ(slices.load(), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - started, milliseconds(5000));
}

TEST(Backoff, WaitSleepsTheWholeWaitWhenNotStopped) {
  Backoff backoff(milliseconds(40), milliseconds(40), 5);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(backoff.wait([] { return false; }));
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(20));
}

}  // namespace
}  // namespace outbox::detail
