// See history.hpp.

#include "observe/history.hpp"

#include <algorithm>

namespace outbox::observe {

void History::record(double unix_seconds, double pending, double quarantined, double oldest_age,
                     const std::vector<SessionCount>& sessions) {
  for (const SessionCount& session : sessions) {
    const auto [entry, fresh] = last_count_.try_emplace(session.relay_id);
    if (!fresh) {
      // Never backwards: a row rewritten by another process under the same id is not negative
      // publishing.
      published_total_ += static_cast<double>(
          std::max<std::int64_t>(0, session.published - entry->second.published));
    } else if (started_) {
      published_total_ += static_cast<double>(std::max<std::int64_t>(0, session.published));
    }
    entry->second = {session.published, unix_seconds};
  }
  std::erase_if(last_count_, [&](const auto& entry) {
    return unix_seconds - entry.second.seen > static_cast<double>(kSpan.count());
  });
  started_ = true;

  if (!points_.empty() &&
      unix_seconds - points_.back().unix_seconds < static_cast<double>(kStep.count())) {
    return;  // the chart's resolution; the counts above still moved on
  }
  HistorySample point{unix_seconds, pending, quarantined, oldest_age, -1, published_total_};
  // The rate over the last kRateOver: from the oldest sample within it, once that is at least
  // kMinRateSpan back (or the runs are further apart than kRateOver: from the last one).
  for (const HistorySample& earlier : points_) {
    const double span = unix_seconds - earlier.unix_seconds;
    if (span <= static_cast<double>(kRateOver.count())) {
      if (span >= static_cast<double>(kMinRateSpan.count())) {
        point.published_per_second = (published_total_ - earlier.published_total) / span;
      }
      break;
    }
  }
  if (point.published_per_second < 0 && !points_.empty()) {
    const HistorySample& last = points_.back();
    const double span = unix_seconds - last.unix_seconds;
    if (span > static_cast<double>(kRateOver.count())) {
      point.published_per_second = (published_total_ - last.published_total) / span;
    }
  }
  points_.push_back(point);
  while (!points_.empty() &&
         unix_seconds - points_.front().unix_seconds > static_cast<double>(kSpan.count())) {
    points_.pop_front();
  }
}

std::vector<HistorySample> History::samples() const { return {points_.begin(), points_.end()}; }

}  // namespace outbox::observe
