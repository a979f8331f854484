#pragma once
// The admin page's last hour, kept by the server (a page opened now shows it; the browser tab
// keeps nothing): pending, quarantined and the oldest pending age from each backlog run, and the
// events published per second, from the counts each relay session writes into its outbox_relays
// row with its heartbeat (migration 17), so a process that runs no relay shows them too.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace outbox::observe {

struct HistorySample {
  double unix_seconds = 0;
  double pending = 0;
  double quarantined = 0;
  double oldest_age = 0;  // seconds
  // Over the minute before: sessions write their count every 10 s, so a shorter span would read
  // a steady rate as bursts. Negative: not known yet (less than kMinRateSpan of history).
  double published_per_second = -1;
  // Published since this server's first backlog run, as the sessions' counts say.
  double published_total = 0;
};

// One relay session's published count as its row says it.
struct SessionCount {
  std::string relay_id;
  std::int64_t published = 0;
};

// Not thread-safe: the backlog monitor records and reads it under its lock.
class History {
 public:
  static constexpr std::chrono::seconds kSpan{3600};
  static constexpr std::chrono::seconds kStep{5};  // at most one sample per step
  static constexpr std::chrono::seconds kRateOver{60};
  static constexpr std::chrono::seconds kMinRateSpan{30};  // three heartbeats

  // A backlog run's totals at `unix_seconds`, and every session the table holds. A session seen
  // for the first time counts all it published (its row is new since the last run), except at
  // the first run, which only sets where counting starts. A session's last count is kept for
  // kSpan after its row went (deleted and written again, or past the reader's limit for a
  // while), so its return is not counted twice.
  void record(double unix_seconds, double pending, double quarantined, double oldest_age,
              const std::vector<SessionCount>& sessions);
  [[nodiscard]] std::vector<HistorySample> samples() const;

 private:
  std::deque<HistorySample> points_;
  struct Count {
    std::int64_t published = 0;
    double seen = 0;  // unix seconds
  };
  std::map<std::string, Count> last_count_;  // by session
  double published_total_ = 0;
  bool started_ = false;
};

}  // namespace outbox::observe
