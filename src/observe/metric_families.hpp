#pragma once
// What the relay, the consumer and the backlog query measured, as Prometheus metric families
// (names and units by Prometheus's conventions; docs/OPERATIONS.md lists them). No I/O: the
// server (observe_server.cpp) gathers the snapshots, this names them.

#include <prometheus/metric_family.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "outbox/kafka_consumer.hpp"
#include "outbox/relay.hpp"

namespace outbox::observe {

// One aggregate type's rows in the table, as the backlog query counts them.
struct BacklogRow {
  std::string aggregate_type;
  double pending = 0;             // pending, not quarantined
  double oldest_pending_age = 0;  // seconds; of the due (or retried) ones; 0 when none
  double quarantined = 0;
  double in_doubt = 0;  // waiting for `outbox reconcile`
};

// Every aggregate type together: what the headline, the history and `outbox status` show.
struct BacklogTotals {
  double pending = 0;
  double quarantined = 0;
  double in_doubt = 0;
  double oldest_pending_age = 0;  // the largest
};
inline BacklogTotals backlog_totals(const std::vector<BacklogRow>& rows) {
  BacklogTotals totals;
  for (const BacklogRow& row : rows) {
    totals.pending += row.pending;
    totals.quarantined += row.quarantined;
    totals.in_doubt += row.in_doubt;
    totals.oldest_pending_age = std::max(totals.oldest_pending_age, row.oldest_pending_age);
  }
  return totals;
}

// A pgoutput slot of the database (the backlog thread's second query): whether a walsender
// streams it and the WAL it holds back. A slot no relay streams keeps WAL until it is dropped.
struct SlotRow {
  std::string database;  // the slot's (a label: slot names repeat across databases)
  std::string name;
  bool streamed = false;
  double retained_bytes = 0;  // -1 once its WAL is gone (invalidated)
};

// One of the aggregates whose head has waited longest (the admin page's "slowest aggregates"),
// from the same query.
struct SlowAggregate {
  std::string aggregate_type;
  std::string aggregate_id;
  std::int64_t pending = 0;  // its pending rows, quarantined ones included
  double waiting_age = 0;    // seconds its head has waited (since due, or since it occurred)
};

// The relay sessions outbox_relays knows that have not ended, by state as `outbox status` names
// it (RelaySessionStatus::state()): a silent one has not been seen for 30 s, stalled or cut off.
struct RelaySessionCounts {
  double working = 0;
  double waiting = 0;  // for work (listening)
  double silent = 0;
};

// How long the backlog query waits before its next run: `refresh`, or ten times as long as the
// last run took when that is longer, so a large backlog costs the database about a tenth of one
// backend however short the refresh; but never more than a minute for that reason (the gauges
// must stay fresher than the alerts' `for:`, and one slow or timed-out run must not blank them
// for long).
inline constexpr std::chrono::seconds kMaxBacklogStretch{60};
inline std::chrono::steady_clock::duration next_backlog_query(
    std::chrono::milliseconds refresh, std::chrono::steady_clock::duration took) {
  const std::chrono::steady_clock::duration stretched =
      std::min<std::chrono::steady_clock::duration>(took * 10, kMaxBacklogStretch);
  return std::max<std::chrono::steady_clock::duration>(refresh, stretched);
}

// How soon after a run a refresh someone asks for (ObserveServer::refresh_backlog) may run: not
// before ten times the last run's duration (capped as above), so that asking cannot make a slow
// query cost more than the tenth of a backend the stretch allows.
inline std::chrono::steady_clock::duration earliest_asked_backlog_query(
    std::chrono::steady_clock::duration took) {
  return std::min<std::chrono::steady_clock::duration>(took * 10, kMaxBacklogStretch);
}

using Families = std::vector<prometheus::MetricFamily>;

void add_build_info(Families& out);
// `shard` (empty: none) labels every series, for a process that runs several relays.
void add_relay(Families& out, const RelayMetrics& metrics, const std::string& shard);
void add_consumer(Families& out, const std::string& consumer,
                  const std::vector<StatSample>& samples, Health health);
// By aggregate type; before any type was seen (a fresh install), each gauge once without the
// label, at 0, so a dashboard and an alert see 0 rather than nothing.
void add_backlog(Families& out, const std::vector<BacklogRow>& rows);
// outbox_relay_sessions{state}: every state, 0 when none.
void add_relay_sessions(Families& out, const RelaySessionCounts& sessions);
// outbox_replication_slot_streamed and _retained_bytes by slot.
void add_slots(Families& out, const std::vector<SlotRow>& slots);
// 1 while the backlog query works, 0 while it fails (the backlog gauges are absent then), and
// how long its last run took (absent before the first).
void add_backlog_up(Families& out, bool up, double last_query_seconds);

// The families in the text format (families of the same name merged, in order of appearance).
std::string serialize(const Families& families);

}  // namespace outbox::observe
