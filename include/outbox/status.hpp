#pragma once
// What an outbox schema looks like now: how many events wait, are in flight, retry, sit in
// quarantine, went out; the replication slots of change-data-capture relays, with the WAL they hold
// back; and the relay sessions. `outbox status` prints it; the admin page shows the sessions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/inbox_admin.hpp"
#include "outbox/schema.hpp"

namespace outbox {

// A logical slot (pgoutput, this database) a change-data-capture relay streams from.
struct SlotStatus {
  std::string name;
  std::string walsender;  // its pid; empty: not streamed
  std::string wal_status;
  std::optional<std::int64_t> retained;     // bytes of WAL it holds; nullopt: its WAL is gone
  std::optional<std::int64_t> unconfirmed;  // bytes not confirmed yet
  bool table_less = false;  // registered for table-less events (the only copy of those)
  // The relay session streaming it: the one whose row names this slot and this walsender (empty:
  // not streamed, or by something that is no relay session of this schema).
  std::string streamed_by;
  std::vector<std::string> standbys;  // relay sessions waiting to take it over
};

// A relay session outbox_relays knows (alive ones refresh their row every 10 s).
struct RelaySessionStatus {
  std::string relay_id;
  bool listening = false;       // waiting for work (LISTEN) rather than working
  double seen_seconds_ago = 0;  // -1 for an ended session
  bool ended = false;
  // A change-data-capture relay's slot, as its row says (migration 15); empty for a polling
  // relay. slot_mode: "streaming" (and slot_streamed: pg_replication_slots agrees, the slot's
  // walsender is the one the row names), "standby" (another relay streams it), "released" (let
  // go over the WAL budget: publishing from the table until it streams again).
  std::string slot;
  std::string slot_mode;
  bool slot_streamed = false;
  // What the session said with its last heartbeat (migration 17): the events it published so
  // far (rows marked, and table-less events), and its health as its /readyz names it ("running",
  // "broker_unavailable", ...; empty before its first heartbeat said).
  std::int64_t published = 0;
  std::string health;

  // "ended", "silent" (not seen for 30 s: stalled or gone), "waiting for work" or "working".
  [[nodiscard]] std::string_view state() const;
  // What it does with its slot, for a person: "streams slot s", "standby for slot s", "let slot s
  // go, publishes from the table", "says it streams slot s, which another walsender streams";
  // empty for a polling relay and for an ended session.
  [[nodiscard]] std::string slot_role() const;
};

struct OutboxStatus {
  // The numbers the admin page and the gauges (outbox_pending_events, _quarantined_events,
  // outbox_oldest_pending_age_seconds) show, by the same query (summed over aggregate types).
  std::int64_t pending = 0;      // not published, not skipped, not quarantined
  std::int64_t in_flight = 0;    // of those: under a relay's lease
  std::int64_t retrying = 0;     // of those: tried before
  std::int64_t quarantined = 0;  // waiting for an operator (not in pending)
  // Sent with no answer to a destination that cannot recognise a repeat: waiting for `outbox
  // reconcile` (not in pending, not quarantined).
  std::int64_t in_doubt = 0;
  std::int64_t published = 0;  // still in the table (cleanup deletes them after the retention)
  std::int64_t skipped = 0;
  // How long the oldest aggregate head that should be going (due, or tried before; not
  // quarantined) has waited, a delayed event counting from its time; 0 when none.
  double oldest_pending_seconds = 0;
  std::vector<SlotStatus> slots;
  std::vector<RelaySessionStatus> relays;  // newest first
  // Gap-aware consumers holding events back (outbox inbox list), by consumer name.
  std::vector<HeldCount> inbox_held;
};

// The relay sessions, newest first, at most `limit`. One query. Throws DatabaseError, and
// InvalidArgument for a negative limit.
std::vector<RelaySessionStatus> read_relay_sessions(PGconn* conn, const SchemaName& schema,
                                                    int limit = 100);

// Everything above, in three queries: the counts read every row not yet deleted (seconds on a
// table of millions), so this is for a person or a slow poll, not a scrape. Throws DatabaseError.
OutboxStatus read_status(PGconn* conn, const SchemaName& schema);

}  // namespace outbox
