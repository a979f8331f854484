#include <fmt/format.h>

#include <array>

#include "outbox/schema.hpp"
#include "pg/connection.hpp"
#include "schema/enqueue_function.hpp"
#include "schema/inbox_tables.hpp"

namespace outbox {
namespace {

struct Migration {
  int version;
  const char* name;
  const char* sql;  // {s} is the quoted schema, {channel} the NOTIFY channel
};

// Append only: a released migration never changes; a change is a new version.
constexpr std::array kMigrations = {
    Migration{1, "outbox tables", R"SQL(
CREATE TABLE {s}.outbox_events (
  event_id           uuid        PRIMARY KEY,
  aggregate_type     text        NOT NULL CHECK (aggregate_type <> ''),
  aggregate_id       text        NOT NULL CHECK (aggregate_id <> ''),
  aggregate_sequence bigint      NOT NULL CHECK (aggregate_sequence > 0),
  event_type         text        NOT NULL CHECK (event_type <> ''),
  schema_version     integer     NOT NULL DEFAULT 1 CHECK (schema_version > 0),
  payload            jsonb       NOT NULL,
  headers            jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
  occurred_at        timestamptz NOT NULL DEFAULT now(),
  available_at       timestamptz NOT NULL DEFAULT now(),
  claimed_by         text,
  claim_until        timestamptz,
  published_at       timestamptz,
  attempt_count      integer     NOT NULL DEFAULT 0,
  last_error         text,
  CONSTRAINT outbox_events_aggregate_sequence_key
    UNIQUE (aggregate_type, aggregate_id, aggregate_sequence)
);
-- The relay's two questions, answered from pending rows only, so the indexes stay as small as
-- the backlog however long the history: "what is due?" and "is a lower sequence still pending?".
CREATE INDEX outbox_events_pending_due_idx
  ON {s}.outbox_events (available_at) WHERE published_at IS NULL;
CREATE INDEX outbox_events_pending_aggregate_idx
  ON {s}.outbox_events (aggregate_type, aggregate_id, aggregate_sequence)
  WHERE published_at IS NULL;

CREATE TABLE {s}.outbox_aggregate_sequences (
  aggregate_type text   NOT NULL,
  aggregate_id   text   NOT NULL,
  last_sequence  bigint NOT NULL CHECK (last_sequence > 0),
  PRIMARY KEY (aggregate_type, aggregate_id)
);

CREATE TABLE {s}.processed_events (
  consumer_name text        NOT NULL,
  event_id      uuid        NOT NULL,
  processed_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_name, event_id)
);

-- One wake-up per inserting statement; PostgreSQL folds equal notifications of one transaction
-- into one, so a transaction that enqueues many events still notifies once.
CREATE FUNCTION {s}.outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{channel}', '');
  RETURN NULL;
END $$;
CREATE TRIGGER outbox_events_notify AFTER INSERT ON {s}.outbox_events
  FOR EACH STATEMENT EXECUTE FUNCTION {s}.outbox_events_notify();
)SQL"},
    Migration{2, "quarantine and skip", R"SQL(
-- A quarantined row stays pending (it blocks its own aggregate, nothing else) but is never due:
-- available_at = 'infinity' keeps it out of the relay's scan. A skipped row is finished without
-- being published; only an operator skips, and every skip is audited.
ALTER TABLE {s}.outbox_events
  ADD COLUMN quarantined_at    timestamptz,
  ADD COLUMN quarantine_reason text,
  ADD COLUMN skipped_at        timestamptz;
-- The relay claims by walking aggregate heads (relay_sql.cpp), so the index by available_at goes:
-- one index less to write per event, and one the planner can no longer pick by mistake for a
-- head's primary-key lookup (it did, on a table without statistics: 30,000 rows read per head).
DROP INDEX {s}.outbox_events_pending_due_idx;
DROP INDEX {s}.outbox_events_pending_aggregate_idx;
CREATE INDEX outbox_events_pending_aggregate_idx
  ON {s}.outbox_events (aggregate_type, aggregate_id, aggregate_sequence)
  WHERE published_at IS NULL AND skipped_at IS NULL;
CREATE INDEX outbox_events_quarantined_idx
  ON {s}.outbox_events (quarantined_at) WHERE quarantined_at IS NOT NULL;

CREATE TABLE {s}.outbox_operator_audit (
  audit_id  bigserial   PRIMARY KEY,
  event_id  uuid        NOT NULL,
  action    text        NOT NULL CHECK (action IN ('retry', 'skip')),
  actor     text        NOT NULL CHECK (actor <> ''),
  reason    text        NOT NULL,
  at        timestamptz NOT NULL DEFAULT now()
);
)SQL"},
    Migration{3, "wake relays only when none is awake", R"SQL(
-- A transaction that NOTIFYs holds a database-wide lock from just before its commit until after
-- it (PostgreSQL keeps the notification queue in commit order that way), so notifying on every
-- commit makes all enqueuing transactions commit one at a time. Relays now say whether they are
-- awake; producers notify only when none is, i.e. when a relay waits for a wake-up. An awake relay
-- finds new rows by itself (it claims again after every broker report and at least every 10 ms).
-- A relay that died awake stops counting once its seen_at is 30 s old.
CREATE TABLE {s}.outbox_relays (
  relay_id  text        PRIMARY KEY,
  listening boolean     NOT NULL,
  seen_at   timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION {s}.outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {s}.outbox_relays
                 WHERE NOT listening AND seen_at > now() - interval '30 seconds') THEN
    PERFORM pg_notify('{channel}', '');
  END IF;
  RETURN NULL;
END $$;
)SQL"},
    Migration{4, "room on each page for the relay's claim", R"SQL(
-- The claim sets claimed_by and claim_until, which no index covers, so PostgreSQL can update the
-- row in place on its page (a HOT update: no new index entries) if the page has room. At the
-- default fillfactor of 100 a page is full when written, and 99% of claims wrote new entries into
-- all three indexes. Half-full pages make the claims HOT: the SQL-only drain went from ~24,000
-- to ~31,000 events/s here (docs/PERFORMANCE.md). The mark cannot be HOT (published_at is in the
-- pending index's predicate). Applies to pages written from now on; nothing is rewritten.
ALTER TABLE {s}.outbox_events SET (fillfactor = 50);
)SQL"},
    Migration{5, "sequences unique among pending rows", R"SQL(
-- UNIQUE (aggregate_type, aggregate_id, aggregate_sequence) covered the whole history, so every
-- event insert and every mark (an update that cannot be HOT) wrote an entry into it. Its job goes
-- to two cheaper guards: the sequence table (every producer takes the next number under the
-- aggregate's row lock) and the pending index, now unique, which the relay's head scan and
-- successor lookup use anyway. The mark statement reads 16% fewer buffers and writes 25% fewer
-- WAL records (docs/PERFORMANCE.md). No longer refused: a writer that bypasses the producer and
-- reuses the number of an event already published. Building the index reads the whole table
-- while writers wait.
ALTER TABLE {s}.outbox_events DROP CONSTRAINT outbox_events_aggregate_sequence_key;
DROP INDEX {s}.outbox_events_pending_aggregate_idx;
CREATE UNIQUE INDEX outbox_events_pending_aggregate_idx
  ON {s}.outbox_events (aggregate_type, aggregate_id, aggregate_sequence)
  WHERE published_at IS NULL AND skipped_at IS NULL;
)SQL"},
    Migration{6, "no NOTIFY when no relay listens", R"SQL(
-- Migration 3 notified whenever no relay was awake, also when no relay ran at all: then every
-- enqueuing commit took the database-wide NOTIFY lock for nobody (a relay that starts claims
-- before it listens). Now producers notify only when some relay listens and none is awake.
-- (statement_timestamp(), not now(): a long transaction must not count a dead relay longer.)
-- Listening relays refresh seen_at as awake ones do (every 10 s); a relay whose row is older than
-- 30 s (it died, or a build before this migration sleeps without beating) is not notified and
-- finds new rows on its idle timer (idle_poll_max).
CREATE OR REPLACE FUNCTION {s}.outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- NULL (no live relay) and false (one is awake) both mean: nobody waits for a wake-up.
  IF (SELECT bool_and(listening) FROM {s}.outbox_relays
      WHERE seen_at > statement_timestamp() - interval '30 seconds') THEN
    PERFORM pg_notify('{channel}', '');
  END IF;
  RETURN NULL;
END $$;
)SQL"},
    Migration{7, "the producer's statement decides NOTIFY itself", R"SQL(
-- The statement trigger cost an enqueuing transaction ~5% (a PL/pgSQL call per statement; pgbench,
-- docs/PERFORMANCE.md). The producer's insert now makes the same check in its own statement and
-- records, for the rest of its transaction, the channel it decided for. The trigger stays for rows
-- other tools insert, and skips itself when the producer has decided for this schema (then a
-- later insert by another writer in the same transaction relies on the producer's check, made a
-- little earlier). CREATE OR REPLACE takes a lock that blocks writers, not readers.
CREATE OR REPLACE TRIGGER outbox_events_notify AFTER INSERT ON {s}.outbox_events
  FOR EACH STATEMENT
  WHEN (current_setting('outbox.wake_checked', true) IS DISTINCT FROM '{channel}')
  EXECUTE FUNCTION {s}.outbox_events_notify();
)SQL"},
    Migration{8, "the cleanup horizon", R"SQL(
-- How far retention cleanup has deleted: every batch that deletes raises deleted_before to its own
-- cutoff in the same transaction. resolve_commit looks an event up to tell a committed transaction
-- from an aborted one; an event missing because cleanup deleted it would read as aborted, and the
-- caller would run a committed transaction again. An event made before this horizon (by its
-- UUIDv7 time) that is missing is "unknown", never "aborted". One row; older builds ignore it.
CREATE TABLE {s}.outbox_cleanup_horizon (
  singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
  deleted_before timestamptz NOT NULL
);
)SQL"},
    Migration{9, "a dead relay's claims are taken over when its session ends", R"SQL(
-- A relay killed with its rows claimed held them for its whole lease (30 s by default). Now every
-- relay session holds a session-level advisory lock with a random key and registers one row per
-- session (relay_id is then the session's claim-token prefix, "<relay id>:<session>"). A relay
-- that finds a row whose lock is no longer held (pg_locks) records when it saw the session end;
-- past a short grace the session counts as dead and any relay may claim what it held; the row
-- goes once its last lease is over. ended_at also takes the row out of the producers' NOTIFY
-- decision at once (seen_at is set to -infinity then). Columns only: no table rewrite. A relay
-- of an older build writes rows without lock_key; they are never judged, and its claims wait for
-- their lease as before (nor does such a relay take over another's claims).
ALTER TABLE {s}.outbox_relays
  ADD COLUMN lock_key      bigint,
  ADD COLUMN lease_ms      bigint,
  ADD COLUMN registered_at timestamptz,
  ADD COLUMN ended_at      timestamptz;
)SQL"},
    Migration{10, "table-less producers and their slots", R"SQL(
-- A table-less producer (ProducerOptions::table_less) writes no row: its events exist only as
-- transactional logical decoding messages in the WAL, and only a replication slot that a relay
-- started with --table-less reads keeps them. Such a relay registers its slot here. The
-- producer's statement calls outbox_table_less_ready(), which refuses to write an event unless a
-- registered slot of this database exists and has not lost WAL; a relay without --table-less
-- refuses to stream from a registered slot, and none drops one (docs/ARCHITECTURE.md,
-- "Table-less producers"). The look at pg_replication_slots costs 0.1-0.2 ms, as much as the
-- rest of the statement, so a session that passed it notes the second (outbox.table_less_checked,
-- a session setting; an aborted transaction undoes it) and looks again in the next one.
-- confirmed_lsn: the relay's confirmed position, saved durably at most once a second; a relay
-- starts streaming there when the slot's own saved position is behind it (after a crash a slot
-- restarts at its checkpointed position, and table-less events it brings again would all be
-- published again). It goes back with the data if the server does; confirmed_system (the
-- cluster's system identifier) keeps a copy of the row in another cluster (a dump restored) from
-- being read as a position there.
CREATE TABLE {s}.outbox_table_less_slots (
  slot_name        text        PRIMARY KEY,
  relay_id         text        NOT NULL,
  registered_at    timestamptz NOT NULL DEFAULT now(),
  confirmed_lsn    pg_lsn,
  confirmed_system text
);
CREATE FUNCTION {s}.outbox_table_less_ready() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF current_setting('wal_level') <> 'logical' THEN
    RAISE EXCEPTION 'outbox: a table-less event needs wal_level = logical (it is %): without it no relay can read the event; set wal_level = logical, or write events to the table (ProducerOptions::table_less = false)',
      current_setting('wal_level') USING ERRCODE = '55000';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM {s}.outbox_table_less_slots t
                 JOIN pg_replication_slots r ON r.slot_name = t.slot_name
                 WHERE r.database = current_database() AND r.plugin = 'pgoutput'
                   AND r.wal_status IS DISTINCT FROM 'lost'
                   -- set once the slot is consistent: a slot still being created misses
                   -- transactions that commit before its consistent point
                   AND r.confirmed_flush_lsn IS NOT NULL) THEN
    RAISE EXCEPTION 'outbox: no slot reads table-less events of this schema (none registered in outbox_table_less_slots exists with its WAL): the event would be lost; start `outbox relay --source cdc --table-less` first, or write events to the table (ProducerOptions::table_less = false)'
      USING ERRCODE = '55000';
  END IF;
  PERFORM set_config('outbox.table_less_checked',
                     extract(epoch FROM statement_timestamp())::bigint::text, false);
  RETURN true;
END
$fn$;
)SQL"},
    Migration{11, "replay in the operator audit", R"SQL(
-- `outbox replay` makes published events pending again (same ids, same sequences), and records
-- each one like a quarantine action.
ALTER TABLE {s}.outbox_operator_audit
  DROP CONSTRAINT outbox_operator_audit_action_check,
  ADD CONSTRAINT outbox_operator_audit_action_check
    CHECK (action IN ('retry', 'skip', 'replay'));
)SQL"},
    Migration{12, "relay sessions judged by their own backend", R"SQL(
-- Any login sees a relay session's advisory-lock key in pg_locks and may queue for it; when the
-- relay died, the waiter held the key and the sweep (which looked at the key alone) took the dead
-- session for alive until its leases ran out: 29.4 s instead of ~1.2 s. A relay now records its
-- backend's pid, and the sweep counts the key only in that backend. Nullable: a relay of an older
-- build writes none and is judged by the key alone, as before. A column only: no rewrite.
ALTER TABLE {s}.outbox_relays ADD COLUMN backend_pid integer;
)SQL"},
    Migration{13, "history only moves forward", R"SQL(
-- What the roles' table and column privileges (roles.cpp) cannot say. An aggregate's counter
-- never goes down: a lower last_sequence made the next event go out as a sequence already
-- published (2 again after 71). The cleanup horizon never goes back (a deleted event would then
-- read as an aborted transaction, which its caller runs again) nor ahead of now. Both refuse with
-- 42501, whoever asks (the owner may disable the trigger for a deliberate repair). A row trigger
-- whose WHEN is false calls no function: the producer's upsert pays one comparison.
CREATE FUNCTION {s}.outbox_refuse_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'outbox: % may not go back (%): it is history that was already published or answered',
    TG_ARGV[0], TG_TABLE_NAME USING ERRCODE = '42501';
END $$;
CREATE TRIGGER outbox_aggregate_sequences_forward
  BEFORE UPDATE ON {s}.outbox_aggregate_sequences FOR EACH ROW
  WHEN (NEW.last_sequence < OLD.last_sequence OR NEW.aggregate_type <> OLD.aggregate_type
        OR NEW.aggregate_id <> OLD.aggregate_id)
  EXECUTE FUNCTION {s}.outbox_refuse_rewrite('an aggregate''s last_sequence');
-- A horizon ahead of now (a clock that was wrong) would make every later cleanup's update, which
-- keeps the greater of the old and new horizons, refused: brought back to now first.
UPDATE {s}.outbox_cleanup_horizon SET deleted_before = now() WHERE deleted_before > now();
CREATE TRIGGER outbox_cleanup_horizon_forward
  BEFORE UPDATE ON {s}.outbox_cleanup_horizon FOR EACH ROW
  WHEN (NEW.deleted_before < OLD.deleted_before OR NEW.deleted_before > now())
  EXECUTE FUNCTION {s}.outbox_refuse_rewrite('the cleanup horizon (nor ahead of now)');
CREATE TRIGGER outbox_cleanup_horizon_not_ahead
  BEFORE INSERT ON {s}.outbox_cleanup_horizon FOR EACH ROW
  WHEN (NEW.deleted_before > now())
  EXECUTE FUNCTION {s}.outbox_refuse_rewrite('the cleanup horizon (nor ahead of now)');

-- Who wrote an audit row, as the server knows it: session_user (a SECURITY DEFINER function or
-- SET ROLE does not change it). The admin role may not set it (roles.cpp grants INSERT on the
-- other columns only), so a row claiming another actor still names the login that wrote it.
-- actor stays the name the operator gives (the admin page records its web user). Rows from
-- before this migration have none.
ALTER TABLE {s}.outbox_operator_audit ADD COLUMN db_user text;
ALTER TABLE {s}.outbox_operator_audit ALTER COLUMN db_user SET DEFAULT session_user;

-- Which role may record processed events under a consumer name. Roles are per program, not per
-- consumer, so the database cannot tell consumer 'billing' from 'shipping' by itself: a name
-- listed here may be written and read (processed_events, row-level security set by roles.cpp)
-- only by members of its role; an unlisted name by any role allowed the table, as before.
CREATE TABLE {s}.outbox_inbox_consumers (
  consumer_name text PRIMARY KEY,
  role_name     text NOT NULL
);
)SQL"},
    Migration{14, "table-less messages proven by their counters", R"SQL(
-- Any role may call pg_logical_emit_message: a table-less relay publishes a message only when
-- the same transaction moved its aggregate's counter first, which it reads from a second
-- publication, <publication>_seq (docs/ARCHITECTURE.md, "Table-less producers"). PostgreSQL 15
-- cannot decode a slot's WAL from before a publication existed under its name: a relay that finds
-- its slot older than <publication>_seq reads it without the proof up to witness_since (the WAL
-- when the relay, or this migration, first saw the publication for that slot), then with it.
ALTER TABLE {s}.outbox_table_less_slots ADD COLUMN witness_since pg_lsn;
-- Where table-less events are in use, the default publication's companion is made here, by the
-- schema's owner (a relay role may not create a publication of a table it does not own), so the
-- relays of this version find it. Without the right to, the relay names the statement to run.
DO $migration$
BEGIN
  IF current_setting('wal_level') = 'logical'
     AND EXISTS (SELECT 1 FROM {s}.outbox_table_less_slots)
     AND NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = {witness_literal}) THEN
    CREATE PUBLICATION {witness} FOR TABLE {s}.outbox_aggregate_sequences
      WITH (publish = 'insert, update');
    UPDATE {s}.outbox_table_less_slots SET witness_since = pg_current_wal_insert_lsn();
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'outbox: publication % not created (%): a table-less relay creates it, or names the statement to run',
    {witness_literal}, SQLERRM;
END
$migration$;
)SQL"},
    Migration{15, "which relay streams which slot", R"SQL(
-- A change-data-capture relay says in its session's row which slot it is for and in which mode:
-- streaming it (with the pid of its walsender, so `outbox status` names it only when
-- pg_replication_slots agrees), waiting as the standby of the relay that streams it, or having let
-- it go over its WAL budget. A polling relay leaves them NULL. Self-reported and shown, never
-- acted on: a row that lies misleads a person reading the status, not a relay. Columns only.
ALTER TABLE {s}.outbox_relays
  ADD COLUMN slot_name     text,
  ADD COLUMN slot_mode     text CHECK (slot_mode IN ('streaming', 'standby', 'released')),
  ADD COLUMN walsender_pid integer;
)SQL"},
    Migration{16, "events from SQL: enqueue()", detail::kEnqueueFunction},
    Migration{17, "what each relay session published, and its health", R"SQL(
-- Written with each relay session's heartbeat (every 10 s): the events it published (the
-- admin page's published-per-second history sums their growth, so a process that runs no relay,
-- `outbox admin`, shows the rate without a scan of the table) and its health as its /readyz
-- names it (running, broker_unavailable, ...: the page's broker state). Self-reported and
-- shown, never acted on. Columns only.
ALTER TABLE {s}.outbox_relays
  ADD COLUMN published bigint NOT NULL DEFAULT 0,
  ADD COLUMN health    text;
)SQL"},
    Migration{18, "events in doubt, settled by reconcile", R"SQL(
-- An event sent with no answer to a destination that cannot recognise a repeat (the HTTP sink
-- with --http-on-unknown reconcile) may or may not have taken effect: sending it again could do
-- it twice. The relay parks it here instead: pending (it blocks its own aggregate), never due
-- (available_at = 'infinity'), not quarantined (`quarantine retry` would send it again). `outbox
-- reconcile` settles it: published, sent again, or skipped, each audited.
ALTER TABLE {s}.outbox_events
  ADD COLUMN in_doubt_at     timestamptz,
  ADD COLUMN in_doubt_reason text;
-- Columns only (no default, no index): the ALTER changes the catalog, not the rows, so it holds
-- the table's lock for moments. Events in doubt are pending, and listing them walks the pending
-- rows, never the history.
ALTER TABLE {s}.outbox_operator_audit
  DROP CONSTRAINT outbox_operator_audit_action_check,
  ADD CONSTRAINT outbox_operator_audit_action_check
    CHECK (action IN ('retry', 'skip', 'replay', 'reconcile_published', 'reconcile_retry',
                      'reconcile_skip'));
)SQL"},
    Migration{19, "the gap-aware inbox", detail::kGapAwareInbox},
};

}  // namespace

int latest_schema_version() { return kMigrations.back().version; }

namespace {

void check_migrate_request(PGconn* conn, std::chrono::milliseconds lock_timeout) {
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument("migrate needs an idle connection, not one inside a transaction");
  }
  if (lock_timeout.count() < 0) {
    throw InvalidArgument(
        fmt::format("migrate: lock timeout is {} ms; give 0 (wait as long as it takes) or more",
                    lock_timeout.count()));
  }
}

// In the migration's transaction: the schema's advisory lock, then the lock timeout, the schema
// and its table of versions.
void lock_and_create_schema(PGconn* conn, const SchemaName& schema,
                            std::chrono::milliseconds lock_timeout) {
  const std::string& s = schema.quoted();
  pg::exec(conn, "SET LOCAL client_min_messages = warning");  // no "already exists" notices
  pg::exec(conn, "SELECT pg_advisory_xact_lock(hashtext($1))",
           {("outbox.migrate." + schema.name()).c_str()});
  // Only now: another migrate call may hold the advisory lock for as long as its DDL takes.
  pg::exec(conn, fmt::format("SET LOCAL lock_timeout = {}", lock_timeout.count()));
  pg::exec(conn, "CREATE SCHEMA IF NOT EXISTS " + s);
  pg::exec(conn, "CREATE TABLE IF NOT EXISTS " + schema.table("outbox_schema_migrations") +
                     " (version integer PRIMARY KEY, name text NOT NULL,"
                     "  applied_at timestamptz NOT NULL DEFAULT now())");
}

// Applies the migrations the schema has not had yet, each recorded; `report` says which.
void apply_missing(PGconn* conn, const SchemaName& schema, MigrationReport& report) {
  const std::string& s = schema.quoted();
  const auto current = pg::exec(
      conn, "SELECT coalesce(max(version), 0) FROM " + schema.table("outbox_schema_migrations"));
  report.from_version = static_cast<int>(current.int64(0, 0));
  report.to_version = report.from_version;
  if (report.from_version > latest_schema_version()) {
    throw Error(fmt::format(
        "schema {} is at version {}, newer than this build of outbox knows ({}); upgrade outbox",
        schema.name(), report.from_version, latest_schema_version()));
  }
  for (const Migration& m : kMigrations) {
    if (m.version <= report.from_version) continue;
    pg::exec(conn, fmt::format(fmt::runtime(m.sql), fmt::arg("s", s),
                               fmt::arg("channel", schema.notify_channel()),
                               fmt::arg("witness", '"' + schema.name() + "_outbox_seq\""),
                               fmt::arg("witness_literal", "'" + schema.name() + "_outbox_seq'")));
    pg::exec(conn,
             "INSERT INTO " + schema.table("outbox_schema_migrations") +
                 " (version, name) VALUES ($1, $2)",
             {std::to_string(m.version).c_str(), m.name});
    report.to_version = m.version;
    ++report.applied;
  }
}

}  // namespace

MigrationReport migrate(PGconn* conn, const SchemaName& schema,
                        std::chrono::milliseconds lock_timeout) {
  check_migrate_request(conn, lock_timeout);
  MigrationReport report;
  pg::exec(conn, "BEGIN");
  try {
    lock_and_create_schema(conn, schema, lock_timeout);
    apply_missing(conn, schema, report);
    pg::commit(conn);
  } catch (const DatabaseError& error) {
    pg::rollback_quietly(conn);
    if (error.sqlstate() != "55P03") throw;
    throw DatabaseError(
        fmt::format("migrate: schema {} left unchanged at version {}: waited {} ms for a lock on "
                    "its tables, which another transaction holds (see pg_locks and "
                    "pg_stat_activity: a long transaction that wrote to outbox_events). Waiting "
                    "longer would stall every producer queued behind the migration. Retry when it "
                    "ends, or raise the lock timeout ({})",
                    schema.name(), report.from_version, lock_timeout.count(), error.what()),
        error.sqlstate(), true);
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
  return report;
}

MigrationReport migrate(const std::string& database_url, const SchemaName& schema,
                        std::chrono::milliseconds lock_timeout) {
  auto connection = pg::Connection::open(database_url, "outbox-migrate");
  return migrate(connection.get(), schema, lock_timeout);
}

}  // namespace outbox
