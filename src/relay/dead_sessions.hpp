#pragma once
// What a relay knows of other relay sessions that ended, from its sweeps (relay_sql::sweep), apart
// from any I/O so it can be tested on its own (tests/unit/dead_sessions_test.cpp): which sessions
// count as dead (their claims may be taken over: the claim gets their token prefixes), which of
// them are new (to say so once), and when to look again.

#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_set>
#include <vector>

#include "pg/array_literal.hpp"

namespace outbox::detail {

class DeadSessions {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  // One row of a sweep: an ended session and how long until it counts as dead (<= 0: it does).
  struct Ended {
    std::string id;  // its outbox_relays row: the claim-token prefix without the last ':'
    double until_dead_ms = 0;
  };

  explicit DeadSessions(milliseconds sweep_every) : sweep_every_(sweep_every) {}

  // Takes what a sweep found at `now`. Returns the sessions that count as dead since this sweep.
  // The next look is due after sweep_every, or just after the first grace still running out.
  std::vector<std::string> update(const std::vector<Ended>& rows, Clock::time_point now) {
    next_sweep_ = now + sweep_every_;
    pg::ArrayLiteral prefixes;
    std::unordered_set<std::string> dead;
    std::vector<std::string> newly_dead;
    for (const Ended& row : rows) {
      if (row.until_dead_ms > 0) {
        next_sweep_ = std::min(
            next_sweep_, now + milliseconds(static_cast<milliseconds::rep>(row.until_dead_ms) + 1));
        continue;
      }
      prefixes.add(row.id + ":");
      if (!dead_.contains(row.id)) newly_dead.push_back(row.id);
      dead.insert(row.id);
    }
    dead_ = std::move(dead);
    prefixes_ = prefixes.text();
    return newly_dead;
  }

  // A PostgreSQL array literal of the dead sessions' claim-token prefixes; "{}" when none.
  [[nodiscard]] const std::string& prefixes() const noexcept { return prefixes_; }
  [[nodiscard]] Clock::time_point next_sweep() const noexcept { return next_sweep_; }

 private:
  milliseconds sweep_every_;
  Clock::time_point next_sweep_{};  // the first look is due at once
  std::unordered_set<std::string> dead_;
  std::string prefixes_ = "{}";
};

}  // namespace outbox::detail
