#pragma once
// Capped exponential backoff with equal jitter: the one retry pacing of every loop that waits
// after a failure (the relay's reconnect, the Kafka consumer, the relay's first connection).
// Each wait is half the current delay plus a random part of up to the other half, so processes
// cut off together do not come back in lockstep yet never retry sooner than half the delay; the
// delay doubles after each wait up to the cap, and reset() returns it to the base after a success.
// Not thread safe: one per retry loop.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>

namespace outbox::detail {

class Backoff {
 public:
  using milliseconds = std::chrono::milliseconds;

  // base > 0 and cap >= base (callers validate their options and say which one is wrong).
  Backoff(milliseconds base, milliseconds cap, std::uint64_t seed = std::random_device{}())
      : base_(base), cap_(cap < base ? base : cap), delay_(base_), random_(seed) {}

  // The next wait: delay/2 + uniform [0, delay/2]; then the delay doubles, at most to the cap.
  milliseconds next() {
    const auto half = delay_.count() / 2;
    const auto wait = milliseconds(
        half + static_cast<milliseconds::rep>(random_() % static_cast<std::uint64_t>(half + 1)));
    delay_ = delay_ >= cap_ / 2 ? cap_ : delay_ * 2;
    return wait;
  }

  // After a success: the next failure waits about `base` again.
  void reset() { delay_ = base_; }

  // The delay the next wait is drawn from (before jitter).
  [[nodiscard]] milliseconds delay() const { return delay_; }

  // Waits next() in slices of at most `slice`, calling `between` after each (the relay polls its
  // broker there); returns false as soon as `stop` says so, true when the whole wait passed.
  bool wait(const std::function<bool()>& stop,
            const std::function<void(milliseconds)>& between = {},
            milliseconds slice = milliseconds(20)) {
    using Clock = std::chrono::steady_clock;
    const auto until = Clock::now() + next();
    while (!stop()) {
      const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
      if (left.count() <= 0) return true;
      const milliseconds step = std::min(left + milliseconds(1), slice);
      if (between) {
        between(step);
      } else {
        std::this_thread::sleep_for(step);
      }
    }
    return false;
  }

 private:
  milliseconds base_;
  milliseconds cap_;
  milliseconds delay_;
  std::mt19937_64 random_;
};

}  // namespace outbox::detail
