#pragma once
// When the change-data-capture source's table path may sweep beside a stream (cdc_source.hpp):
// every CdcOptions::table_poll, except after a sweep that took nothing, which holds the next back
// for kSpacing times as long as its own claims ran (at most `longest_hold`), counted from its end
// and looked at every table_poll. Behind a large backlog the stream will bring, a sweep visits
// every pending aggregate's head and takes none of them (untouched rows newer than the horizon
// are the stream's): in a 10,000-aggregate catch-up that was 0.2 of a core, and the spacing keeps
// it near a tenth of the table session's time. Where the table holds few pending aggregates a
// sweep costs milliseconds, so what only the table path publishes (rows from before the slot,
// touched rows, what the stream left to the table) waits as before; behind a large backlog, up to
// longest_hold more. Not held back: a sweep that took rows, or one with a claim that could take
// touched rows only (a stream that has not read a commit yet: its emptiness says nothing of the
// older rows). A relay session found dead has its claims taken over at once
// (CdcSource::run_duties), whatever the hold.

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace outbox::detail {

class TableSweep {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSpacing = 10;
  static constexpr int kMostPolls = 10;  // the longest hold, in table_polls (StreamSession)

  explicit TableSweep(Clock::duration longest_hold) : longest_hold_(longest_hold) {}

  // Whether a sweep may begin at `now` (asked every table_poll).
  [[nodiscard]] bool may_begin(Clock::time_point now) const { return now >= next_; }

  // One claim of the sweep under way.
  struct Claim {
    Clock::time_point started, ended;
    std::size_t took = 0;
    bool touched_only = false;  // its horizon let it take touched rows only
    bool last = false;          // it reached the end of the pending aggregates: the sweep ends
  };
  void ran(const Claim& claim) {
    busy_ += claim.ended - claim.started;
    held_back_ = held_back_ && claim.took == 0 && !claim.touched_only;
    if (!claim.last) return;
    next_ = held_back_ ? claim.ended + std::min<Clock::duration>(kSpacing * busy_, longest_hold_)
                       : claim.ended;
    busy_ = {};
    held_back_ = true;
  }

 private:
  Clock::duration longest_hold_;
  Clock::time_point next_{};
  Clock::duration busy_{};
  bool held_back_ = true;  // whether the next sweep is held back, so far
};

}  // namespace outbox::detail
