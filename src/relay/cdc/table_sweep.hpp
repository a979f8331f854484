#pragma once
// When the change-data-capture source's table path may sweep (cdc_source.hpp): every
// CdcOptions::table_poll, except after a sweep that took nothing, which holds the next back for
// kSpacing times as long as its own statements ran. Behind a large backlog the stream will bring,
// a sweep visits every pending aggregate's head and takes none of them (untouched rows newer than
// the horizon are the stream's): in a 10,000-aggregate catch-up that was 0.2 of a core, and the
// spacing keeps it under a tenth of the table session's time. Where the table holds few pending
// aggregates a sweep costs a few milliseconds and the spacing stays under table_poll, so what only
// the table path can publish (rows from before the slot, touched rows, what the stream left to
// the table) waits as before; behind a large backlog it waits up to ten sweeps' time.

#include <chrono>
#include <cstddef>

namespace outbox::detail {

class TableSweep {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSpacing = 10;

  // Whether a sweep may begin at `now` (asked every table_poll).
  [[nodiscard]] bool may_begin(Clock::time_point now) const { return now >= next_; }

  // One claim of the sweep under way ran from `started` to `ended` and took `took` rows; `last`:
  // it reached the end of the pending aggregates, which ends the sweep.
  void ran(Clock::time_point started, Clock::time_point ended, std::size_t took, bool last) {
    busy_ += ended - started;
    took_ = took_ || took > 0;
    if (!last) return;
    next_ = took_ ? ended : ended + kSpacing * busy_;
    busy_ = {};
    took_ = false;
  }

  // A stream (re)started: the next sweep may begin at once.
  void restart(Clock::time_point now) {
    next_ = now;
    busy_ = {};
    took_ = false;
  }

 private:
  Clock::time_point next_{};
  Clock::duration busy_{};
  bool took_ = false;
};

}  // namespace outbox::detail
