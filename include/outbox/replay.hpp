#pragma once
// Replay: publish again events that were published, still inside the retention (cleanup deletes
// published rows past it). Each chosen event becomes pending again, same event id, same
// per-aggregate sequence, so any relay publishes it again in its aggregate's order; consumers
// with an inbox ignore what they already applied, and a new consumer (or a rebuilt projection)
// reads the window again. Every replayed event is recorded in outbox_operator_audit
// (action 'replay'), like quarantine actions.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

// Which published events: occurred_at in [since, until), narrowed by the optional filters.
// `since` and `until` are timestamps PostgreSQL reads as timestamptz ("2026-12-01 18:00+00",
// "2026-12-01T18:00:00Z"); until empty: now.
struct ReplayFilter {
  std::string since;
  std::string until;
  std::optional<std::string> aggregate_type;
  std::optional<std::string> aggregate_id;
  std::optional<EventId> event_id;
};

struct ReplayPlan {
  std::int64_t events = 0;
  std::int64_t aggregates = 0;
  std::string first_occurred_at;  // empty when no event matches
  std::string last_occurred_at;
};

// What replay() would take (a dry run); changes nothing. Throws InvalidArgument for a filter
// PostgreSQL cannot read (naming it), DatabaseError otherwise.
ReplayPlan plan_replay(PGconn* conn, const SchemaName& schema, const ReplayFilter& filter);

struct ReplayResult {
  std::vector<EventId> replayed;  // made pending again
  // Aggregates left alone because a relay held one of their events under a lease at that
  // moment (a replay then would put an earlier event behind one in flight): run it again.
  std::size_t busy_aggregates = 0;
};

// Makes the chosen events pending again, in transactions that each hold whole aggregates (an
// aggregate's chosen events go back together, so its replay stays in sequence order, ahead of
// its newer events), about `batch_events` events per transaction; calls `progress(done, total)`
// after each. Each transaction locks the aggregates' pending rows first and leaves out an
// aggregate with one under a live lease. Events that are pending now are left alone. `until`
// empty is fixed to the time the replay starts. With wal_level = logical, each transaction also
// tells change-data-capture relays (a logical message "outbox-replay:<schema>") to check their
// next event of every aggregate against the table. `conn` must be idle. Throws
// InvalidArgument (empty actor or reason, a filter PostgreSQL cannot read), DatabaseError.
ReplayResult replay_published(PGconn* conn, const SchemaName& schema, const ReplayFilter& filter,
                              const std::string& actor, const std::string& reason,
                              const std::function<void(std::size_t, std::size_t)>& progress = {},
                              std::size_t batch_events = 1000);

// How many of `event_ids` are published (again): for a caller that waits for relays to finish.
std::size_t count_published(PGconn* conn, const SchemaName& schema,
                            const std::vector<EventId>& event_ids);

}  // namespace outbox
