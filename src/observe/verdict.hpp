#pragma once
// The admin page's headline: healthy, degraded or stalled, and why, from the numbers the page
// shows below it (the backlog run, the relay sessions, this process's parts, the slots), so the
// headline never says something the tables do not.
//
//   stalled   events are not going out: the database cannot be read; events pending and no relay
//             running; or nothing published for a minute while the oldest pending event waited
//             longer than a minute.
//   degraded  they go, but something needs a person: a silent relay session, a relay or consumer
//             that reports a broker or database problem, quarantined events or events in doubt
//             (waiting for `outbox reconcile`), events a gap-aware consumer parked (waiting for
//             `outbox inbox release|skip` or a predecessor), the oldest pending
//             event older than a minute, a replication slot no relay streams, no relay at all.
//   healthy   none of those.
//   starting  no backlog run has ended yet: nothing is known.

#include <string>
#include <utility>
#include <vector>

#include "observe/metric_families.hpp"

namespace outbox::observe {

inline constexpr double kLateSeconds = 60;  // OutboxBacklogAge's threshold

struct VerdictInput {
  bool backlog_read = false;  // a backlog run has ended (worked or failed): before, "starting"
  bool backlog_ok = false;
  std::string backlog_error;
  double pending = 0;
  double quarantined = 0;
  double in_doubt = 0;
  double oldest_age = 0;
  RelaySessionCounts sessions;
  // What reports a problem of its own, each "relay r-1: broker_unavailable" or the like.
  std::vector<std::string> unwell;
  std::vector<std::string> unstreamed_slots;  // names
  // Gap-aware consumers' parked events (outbox inbox list), by consumer name; 0s left out.
  std::vector<std::pair<std::string, double>> parked_at_consumers;
  // Negative: not known (the first half minute of history, or a relay of a build before
  // migration 17 that writes no count).
  double published_last_minute = -1;
};

struct Verdict {
  std::string state;  // "healthy", "degraded", "stalled" or "starting"
  std::string reason;
};

Verdict judge(const VerdictInput& in);

}  // namespace outbox::observe
