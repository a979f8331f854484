#pragma once
// When the polling relay claims: the timing half of its loop, apart from any I/O so it can be
// tested on its own (tests/unit/claim_schedule_test.cpp). The loop (relay.cpp) decides *whether* a
// claim is wanted (a NOTIFY, a broker report, its own periodic look); this says whether a wanted
// claim may go now and how long the loop may wait before its next own look.

#include <chrono>
#include <cstddef>

namespace outbox::detail {

// --- the relay loop's timing (relay.cpp) ---

// An awake relay looks for new rows by itself every kAwakePoll (producers do not notify it), or
// every kStalledPoll while sends are in flight and no broker report came for kStallAfter (a
// stalled broker: looking hundreds of times a second would only re-walk its own leased heads).
// At 10 ms, rows committed while the relay waited for acks waited up to 10 ms: live 500/s p50
// ~8 ms, 1,000/s p99 ~12 ms; at 3 ms, 4.4 and 6 ms (docs/PERFORMANCE.md).
inline constexpr std::chrono::milliseconds kAwakePoll{3};
// (Claims that broker reports ask for are paced under heavy traffic: detail::ClaimSchedule.)
inline constexpr std::chrono::milliseconds kStalledPoll{80};
inline constexpr std::chrono::milliseconds kStallAfter{100};

// An awake relay that runs out of work stays awake this long before it asks producers to notify
// it. Under steady traffic it otherwise fell asleep between events, and a producer that had seen
// it still awake (so sent no NOTIFY) waited for its idle timer: at 200 events/s the median
// latency was either 1.4 or 7-8 ms from run to run; staying awake, ~3 ms every run.
inline constexpr std::chrono::milliseconds kStayAwake{200};

// A relay that has just started to listen sleeps this long first, then twice as long each time
// up to idle_poll_max, so a row whose producer saw the relay still awake is found soon.
inline constexpr std::chrono::milliseconds kFirstIdleWait{2};

class ClaimSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  // Under heavy live traffic, claims at least kGap apart. Every broker report asks for a claim
  // (a published event may unblock a successor; a failed one frees room), and at live rates
  // reports came every millisecond or two: flat out most claims found a few rows, and the relay's
  // PostgreSQL session spent its time on per-statement costs. Pacing starts when a claim finds
  // kHeavyFrom rows or more, which an unpaced relay sees from ~3,000 events/s on; a paced claim
  // at 1,000 events/s finds ~3, so lighter traffic returns to unpaced claims and keeps its
  // latency. A NOTIFY and a backlog (a full batch, more aggregates after the cursor) are never
  // paced.
  static constexpr milliseconds kGap{3};
  static constexpr std::size_t kHeavyFrom = 5;

  explicit ClaimSchedule(Clock::time_point now) : last_claim_(now) {}

  // A claim starts now.
  void started(Clock::time_point now) { last_claim_ = now; }
  // It found `rows`; `more_waiting`: it filled its batch or stopped before the end of the
  // aggregates, so the next claim goes at once.
  void finished(std::size_t rows, bool more_waiting) {
    more_waiting_ = more_waiting;
    heavy_ = rows >= kHeavyFrom;
  }
  // New rows were announced (a NOTIFY) or the connection is new: the next claim is not paced.
  void announced() { more_waiting_ = true; }

  // Whether a wanted claim must wait until kGap after the last one.
  [[nodiscard]] bool paced(Clock::time_point now) const {
    return heavy_ && !more_waiting_ && now - last_claim_ < kGap;
  }
  // Whether `interval` has passed since the last claim (the relay's own periodic look).
  [[nodiscard]] bool due(Clock::time_point now, milliseconds interval) const {
    return now - last_claim_ >= interval;
  }
  // Time until `interval` after the last claim; rounded up, so a look due in under a millisecond
  // is still waited for instead of polled for without waiting. Negative when already due.
  [[nodiscard]] milliseconds until(Clock::time_point now, milliseconds interval) const {
    return std::chrono::ceil<milliseconds>(last_claim_ + interval - now);
  }

 private:
  Clock::time_point last_claim_;
  bool more_waiting_ = true;  // the first claim goes at once
  bool heavy_ = false;        // the last claim found kHeavyFrom rows or more
};

}  // namespace outbox::detail
