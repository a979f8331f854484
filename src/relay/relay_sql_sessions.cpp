// The relay_sql statements of relay sessions: registration (set_listening, forget, retire), the
// session lock, the sweep of ended sessions, and the schema's version (relay_sql.hpp).
#include <fmt/format.h>

#include "outbox/relay.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::relay_sql {

pg::Connection open_relay_session(const std::string& database_url, bool durable_marks) {
  auto connection = pg::Connection::open(database_url, std::string(kRelayApplicationName));
  for (const std::string& setting : session_settings(durable_marks)) {
    pg::exec(connection.get(), setting);
  }
  return connection;
}

namespace {

// sweep: row id, ms until dead.
enum SweepColumn : int { kSessionId = 0, kUntilDeadMs = 1 };

}  // namespace

std::string set_listening(const SchemaName& schema) {
  // The insert (a new session, or a row someone deleted) also records the session's lock, its
  // backend (the sweep counts the lock only there) and lease; an update only the state, the
  // heartbeat, the slot a source built on the session streams ($5-$7, NULL for none) and the
  // events the session published and its health ($8, $9: migration 17).
  return fmt::format(R"SQL(INSERT INTO {relays} AS r
  (relay_id, listening, seen_at, lock_key, lease_ms, registered_at, backend_pid,
   slot_name, slot_mode, walsender_pid, published, health)
VALUES ($1, $2::bool, now(), $3::bigint, $4::bigint, now(), pg_backend_pid(),
        $5, $6, $7::int, $8::bigint, $9)
ON CONFLICT (relay_id) DO UPDATE SET listening = EXCLUDED.listening, seen_at = now(),
  slot_name = EXCLUDED.slot_name, slot_mode = EXCLUDED.slot_mode,
  walsender_pid = EXCLUDED.walsender_pid, published = EXCLUDED.published,
  health = EXCLUDED.health)SQL",
                     fmt::arg("relays", schema.table("outbox_relays")));
}

std::string forget_relay(const SchemaName& schema) {
  return "DELETE FROM " + schema.table("outbox_relays") + " WHERE relay_id = $1";
}

std::string retire_relay(const SchemaName& schema) {
  return "UPDATE " + schema.table("outbox_relays") +
         " SET ended_at = coalesce(ended_at, now()), seen_at = '-infinity' WHERE relay_id = $1";
}

std::string take_session_lock() { return "SELECT pg_try_advisory_lock($1::bigint)"; }

std::string sweep(const SchemaName& schema) {
  // pg_locks shows a bigint advisory key as classid (high 32 bits) and objid (low 32 bits), with
  // objsubid 1; relays take non-negative keys, so the shift never reaches the sign bit. pg_locks
  // (unlike pg_stat_activity's details) is visible to every role. Reading it takes the lock
  // manager's partition locks in shared mode for a moment: cheap at a few looks a second.
  //
  // The key counts only in the backend that registered the session (backend_pid, migration 12).
  // Every login sees the key in pg_locks and may queue pg_advisory_lock(key) for it: once the
  // relay's backend is gone that waiter holds the key, and a sweep that looked at the key alone
  // took the dead session for alive until its leases ran out (29.4 s instead of ~1.2 s, measured
  // with 30 s leases). To fool this sweep a stranger needs the key and the dead backend's very
  // pid, which the OS hands out again only after the whole pid range, before the next look
  // (500 ms). Rows without backend_pid (relays of builds before migration 12) are judged by
  // the key alone, as before.
  //
  // A row whose session is gone may belong to a relay that is reconnecting (a network blip, an
  // operator's pg_terminate_backend): within the grace $1 it moves what it still holds to its
  // new session (adopt) and retires this row, so nothing it holds is taken; what stays under
  // this session (a mark a crash undid, a claim whose answer the lost connection never brought)
  // is taken over once the grace is over. A session from before the server's start died in a
  // restart, which every relay goes through at once; those get $2, enough for a relay in its
  // longest reconnect backoff. Rows without lock_key (relays of an older build) are never judged.
  return fmt::format(R"SQL(WITH held AS MATERIALIZED (
  SELECT (l.classid::int8 << 32) | l.objid::int8 AS lock_key, l.pid
  FROM pg_catalog.pg_locks l
  WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
    AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                      WHERE d.datname = current_database())
), sessions AS MATERIALIZED (
  SELECT r.relay_id, r.lock_key, r.backend_pid, r.ended_at, coalesce(r.lease_ms, 0) AS lease_ms,
         CASE WHEN r.registered_at < pg_postmaster_start_time() THEN $2::bigint ELSE $1::bigint END
           * interval '1 millisecond' AS grace
  FROM {relays} r
  WHERE r.lock_key IS NOT NULL
), ended AS (
  -- Seen without its lock for the first time. Its LISTEN ended with it: producers stop counting it
  -- now (they look at rows seen in the last 30 s), awake or listening.
  UPDATE {relays} r
  SET ended_at = now(), seen_at = '-infinity'
  FROM sessions s
  WHERE r.relay_id = s.relay_id AND r.ended_at IS NULL AND s.ended_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM held h WHERE h.lock_key = s.lock_key
                    AND (s.backend_pid IS NULL OR h.pid = s.backend_pid))
  RETURNING r.relay_id, s.grace
), forgotten AS (
  -- Every lease the session took has run out since: nothing of it is left to take over.
  DELETE FROM {relays} r
  USING sessions s
  WHERE r.relay_id = s.relay_id
    AND s.ended_at + s.grace + s.lease_ms * interval '1 millisecond' < now()
)
SELECT s.relay_id, extract(epoch FROM s.ended_at + s.grace - now()) * 1000
FROM sessions s
WHERE s.ended_at IS NOT NULL
UNION ALL
SELECT relay_id, extract(epoch FROM grace) * 1000
FROM ended)SQL",
                     fmt::arg("relays", schema.table("outbox_relays")));
}

std::string schema_version(const SchemaName& schema) {
  return "SELECT coalesce(max(version), 0) FROM " + schema.table("outbox_schema_migrations");
}

std::vector<EndedSession> read_sweep(const pg::Result& result) {
  std::vector<EndedSession> rows;
  for (int row = 0; row < result.rows(); ++row) {
    rows.push_back({std::string(result.text(row, kSessionId)),
                    std::stod(std::string(result.text(row, kUntilDeadMs)))});
  }
  return rows;
}

}  // namespace outbox::relay_sql
