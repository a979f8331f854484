#pragma once
// The statements of the relay's table path (claims, marks, failures, registration, sweeps), in
// one place, with one reader per statement that turns its rows into structs (the columns are
// named next to the SQL, in relay_sql.cpp). Both sources use them: a change-data-capture relay
// claims and marks through its table path too (its own statements: relay/cdc/cdc_sql.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"
#include "pg/connection.hpp"

namespace outbox::relay_sql {

// What the relay sets on its connection before it prepares anything (relay_sql.cpp says why).
std::vector<std::string> session_settings(bool durable_marks = false);
// A relay's session: a connection named kRelayApplicationName with session_settings applied.
pg::Connection open_relay_session(const std::string& database_url, bool durable_marks);

// $1 claim token, $2 aggregates to visit (the batch size), $3 lease in ms, $4/$5 the cursor (the
// last aggregate visited by the previous claim; '' and '' to start over), $6 text[]: the
// claim-token prefixes ("<row id>:") of dead relay sessions (see sweep), $7 the payload and
// header bytes the relay may still hold, $8 whether it holds none (then a row larger than $7 may
// go alone), $9 timestamptz: the horizon for rows no relay has touched yet ('infinity' for a
// polling relay; a change-data-capture relay leaves the rows its stream will bring to the stream:
// see claim()). Claims due rows that are the lowest pending sequence of their aggregate and not
// leased to anyone (or whose lease expired, or is held by a dead session), in the order visited,
// until the next would not fit the bytes. SKIP LOCKED lets concurrent relays take disjoint rows
// without waiting for each other.
// Returns the claimed rows (payload and headers as text), then one cursor row (event_id NULL;
// see relay_sql.cpp).
// `shard`: a condition on the row `e` the claim takes only rows of (shard_condition); empty: all.
std::string claim(const SchemaName& schema, const std::string& shard = "");

// Whether an outbox row (its columns prefixed with `prefix`, e.g. "e.") belongs to shard `shard`
// of `shards`: a hash of its aggregate. The change-data-capture relay's publication row filter
// and its own claim use the same expression (docs/ARCHITECTURE.md, "Shards"). Only built-in
// immutable functions, as a row filter requires.
std::string shard_condition(const std::string& prefix, unsigned shards, unsigned shard);
// $1 uuid[], $2 token[]: marks published only rows that still carry the token that sent them
// (a NULL token: rows claimed by no one; a change-data-capture relay's streamed rows have their
// own, simpler mark, cdc_sql::mark_streamed), and (when $5) claims their successors with token $3
// and lease $4 ms, as many as fit $6 bytes. Rows: the claim's ten columns plus a kind, 'marked'
// (only event_id set) or 'claimed'.
std::string mark_published(const SchemaName& schema);
// $1 uuid[], $2 token[] (NULL: unclaimed, as for mark_published), $3 error[], $4 backoff base
// ms, $5 backoff cap ms, $6 attempt limit (0: none), $7 permanent bool[], $8 float8[]: the least
// delay in ms the destination asked for (Retry-After; 0: none), $9 in_doubt bool[] (parks the
// row for `outbox reconcile`: no quarantine, no retry). Returns (event_id, quarantined, in_doubt)
// of the rows it changed.
std::string mark_failed(const SchemaName& schema);
// $1 uuid[], $2 token[], $3 lease ms: extends leases of rows still in flight.
std::string renew(const SchemaName& schema);
// $1 uuid[], $2 token[] (of the previous session), $3 lease ms, $4 a token of the new session:
// after a reconnect, moves the rows that still carry their token to the new token with a fresh
// lease. Returns the event ids it moved.
std::string adopt(const SchemaName& schema);
// $1 the session's row id ("<relay id>:<session>"), $2 listening bool, $3 the session's advisory
// lock key, $4 its lease in ms: records whether this relay waits for a NOTIFY (true) or is awake
// and finds new rows by itself (false); also the heartbeat (seen_at). The first call of a session
// registers it.
std::string set_listening(const SchemaName& schema);
// $1 a session's row id: a stopping relay no longer counts as awake.
std::string forget_relay(const SchemaName& schema);
// $1 a session's row id: a reconnected relay's previous session is over. Ended now (unless a
// sweep saw it end already) and out of the producers' count; the claims still under it count
// as dead after its grace, as a killed session's.
std::string retire_relay(const SchemaName& schema);
// $1 bigint: the session-level advisory lock a relay session holds while it lives; true when
// taken.
std::string take_session_lock();
// $1 grace in ms, $2 grace in ms for sessions older than the server (they died in a restart):
// marks rows whose session lock is no longer held by the session's own backend as ended, deletes
// rows whose session ended a grace and a lease ago, and returns every ended session: (row id, ms
// until it counts as dead;
// <= 0: dead, its claims may be taken over).
std::string sweep(const SchemaName& schema);
// The highest migration applied to the schema.
std::string schema_version(const SchemaName& schema);

// --- what the statements return ---

// A claim's rows: the events it claimed, in the order visited, and where the visit ended.
struct ClaimRows {
  std::vector<Event> events;
  bool visited_any = false;  // false: no pending aggregate after the cursor at all
  // The last aggregate visited (the next claim continues after it), and how many were visited.
  std::string last_type, last_id;
  std::int64_t visited = 0;
  // Set when the visit stopped at a claimable head the byte room could not hold: what it needs.
  std::optional<std::uint64_t> stopped_for_bytes;
  std::size_t taken_over = 0;  // of the events: claimed from an expired or dead session's lease
  std::vector<bool> taken_over_each;  // per event, in the order of `events`
};
ClaimRows read_claim(const pg::Result& result);

// A mark_published's rows: the event ids it marked, and the successors it claimed.
struct MarkRows {
  std::vector<std::string> marked;
  std::vector<Event> successors;
  std::size_t taken_over = 0;         // of the successors: as ClaimRows::taken_over
  std::vector<bool> taken_over_each;  // per successor
};
MarkRows read_mark_published(const pg::Result& result);

// A mark_failed's rows: every row it changed, and whether that quarantined it.
struct FailedRow {
  std::string event_id;
  bool quarantined = false;
  bool in_doubt = false;
};
std::vector<FailedRow> read_mark_failed(const pg::Result& result);

// A sweep's rows: ended sessions and the ms until each counts as dead (<= 0: it does).
struct EndedSession {
  std::string id;
  double until_dead_ms = 0;
};
std::vector<EndedSession> read_sweep(const pg::Result& result);

}  // namespace outbox::relay_sql
