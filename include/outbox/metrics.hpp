#pragma once
// Plain snapshots of what the relay and the consumer measure, read from any thread. The
// outbox::observe target (outbox/observe.hpp) serves them in Prometheus's text format; an
// application with its own metrics system can read them directly (Relay::metrics()).

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/stats.hpp"

namespace outbox {

// A histogram's state: `counts[i]` observations were <= upper_bounds[i] and above the bound
// before it; counts has one entry more than upper_bounds, for the observations above the last.
struct HistogramSnapshot {
  std::vector<double> upper_bounds;
  std::vector<std::uint64_t> counts;
  std::uint64_t count = 0;  // every observation
  double sum = 0;           // of every observation
};

// What the relay counts per aggregate type (outbox/stats.hpp says how a list reads).
#define OUTBOX_AGGREGATE_TYPE_COUNTS(X)                                                      \
  X(published, counter, always, "outbox_relay_events_published_total", "published {}",       \
    "Events recorded published after the broker's ack (marked, or done: table-less).")       \
  X(failed, counter, always, "outbox_relay_events_failed_total", "failed {}",                \
    "Sends that failed or had an unknown outcome (rescheduled, or quarantined).")            \
  X(retried, counter, always, "outbox_relay_events_retried_total", "retried {}",             \
    "Sends of an event that failed before.")                                                 \
  X(quarantined, counter, always, "outbox_relay_events_quarantined_total", "quarantined {}", \
    "Events set aside for an operator (permanent failure or attempt limit).")                \
  X(fenced, counter, always, "outbox_relay_fenced_writes_total", "fenced {}",                \
    "Outcomes not written because the row was no longer this relay's (re-claimed after its " \
    "lease expired, or skipped): a duplicate publish is possible.")

// What the relay counted for the events of one aggregate type.
struct AggregateTypeCounts {
  OUTBOX_AGGREGATE_TYPE_COUNTS(OUTBOX_STAT_FIELD)
};

[[nodiscard]] std::vector<StatSample> stat_samples(const AggregateTypeCounts& counts);

// Aggregate types are producers' data: the first kMaxAggregateTypeLabels distinct ones are
// counted each under its name, the rest together under kOtherAggregateTypes, so a careless or
// hostile producer cannot grow a relay's memory or a Prometheus server's series without bound.
inline constexpr std::size_t kMaxAggregateTypeLabels = 100;
inline constexpr const char* kOtherAggregateTypes = "_other";

}  // namespace outbox
