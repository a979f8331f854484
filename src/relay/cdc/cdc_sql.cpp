#include "relay/cdc/cdc_sql.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "pg/params.hpp"

namespace outbox::cdc_sql {

std::string check_streamed(const SchemaName& schema) {
  // Per candidate, by primary key: is its row visible to this statement's snapshot (a streamed
  // transaction is decoded a moment before other sessions see it committed, and under
  // synchronous replication until the standby confirms it)? Is it finished already (marked or
  // skipped: a transaction streamed again after a restart, or after the table path published it
  // while no slot was there)? Is it the table path's (touched: a failure's backoff, quarantine;
  // or claimed under a live lease)? And, where asked, one probe of the pending-by-aggregate index:
  // its first pending entry below the candidate's sequence. All are LATERAL ... LIMIT 1, so no
  // plan reads an index whole for a hash join (the generic plan of an EXISTS did, on an empty
  // table). Only candidates that must not simply go come back; unordered (the reader sorts).
  //
  // A table-less candidate ($6: its transaction id; NULL or '' for a row's) has no row: it is
  // visible once its transaction is (pg_visible_in_snapshot: the same moment its row would be).
  // A row it does have was written by the relay (materialized: failed, or left to the table), so
  // it is the table's unless finished.
  return fmt::format(R"SQL(SELECT c.n::text,
       (v.event_id IS NOT NULL OR (x.xid IS NOT NULL AND pg_visible_in_snapshot(x.xid, pg_current_snapshot())))::text,
       (l.one IS NOT NULL)::text, coalesce(v.state, '')
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::bool[], $6::text[]) WITH ORDINALITY
       AS c(event_id, aggregate_type, aggregate_id, sequence, check_lower, xid_text, n)
CROSS JOIN LATERAL (SELECT nullif(c.xid_text, '')::xid8 AS xid) x
LEFT JOIN LATERAL (
  SELECT e.event_id,
         CASE WHEN e.published_at IS NOT NULL OR e.skipped_at IS NOT NULL THEN 'finished'
              WHEN x.xid IS NOT NULL OR e.available_at <> e.occurred_at
                   OR e.quarantined_at IS NOT NULL OR e.claim_until > now() THEN 'table' END AS state
  FROM {events} e WHERE e.event_id = c.event_id LIMIT 1) v ON true
LEFT JOIN LATERAL (
  SELECT 1 AS one FROM {events} e
  WHERE c.check_lower
    AND e.aggregate_type = c.aggregate_type AND e.aggregate_id = c.aggregate_id
    AND e.aggregate_sequence < c.sequence
    AND e.published_at IS NULL AND e.skipped_at IS NULL  -- the pending index's predicate
  LIMIT 1) l ON true
WHERE NOT (v.event_id IS NOT NULL OR (x.xid IS NOT NULL AND pg_visible_in_snapshot(x.xid, pg_current_snapshot())))
   OR l.one IS NOT NULL OR v.state IS NOT NULL)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

// Table-less events written to the table as pending rows. Touched ($10), available_at after
// occurred_at: the table path claims them at once (the stream's check leaves them to it).
// Untouched: as the producer's own row, claimed only past the CDC claim's horizon. An id already
// there (written before a crash, streamed again) is left as it is, and so is an event whose
// sequence another pending row of its aggregate holds (the caller sees it missing from RETURNING).
// Committed durably whatever the session's synchronous_commit: the slot's position moves past
// these events only once the row is the truth.
std::string materialize_table_less(const SchemaName& schema) {
  return fmt::format(R"SQL(WITH durable AS (
  SELECT set_config('synchronous_commit', 'on', true)
)
INSERT INTO {events} (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
                      schema_version, payload, headers, occurred_at, available_at)
SELECT r.event_id, r.aggregate_type, r.aggregate_id, r.sequence, r.event_type, r.schema_version,
       r.payload::jsonb, r.headers::jsonb, r.occurred_at,
       CASE WHEN $10::bool THEN greatest(now(), r.occurred_at + interval '1 microsecond')
            ELSE r.occurred_at END
FROM durable, unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::int[],
                     $7::text[], $8::text[], $9::timestamptz[])
       AS r(event_id, aggregate_type, aggregate_id, sequence, event_type, schema_version, payload,
            headers, occurred_at)
ON CONFLICT DO NOTHING
RETURNING event_id)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

std::string mark_streamed(const SchemaName& schema) {
  // Each id's row by primary key. Rechecked when a concurrent update got there first (a relay's
  // claim of a touched row): a row claimed meanwhile is its claimant's to mark.
  return fmt::format(
      "UPDATE {events} e "
      "SET published_at = coalesce(e.published_at, now()), claim_until = NULL, last_error = NULL "
      "WHERE e.event_id = ANY($1::uuid[]) AND e.claimed_by IS NULL AND e.skipped_at IS NULL "
      "RETURNING e.event_id::text",
      fmt::arg("events", schema.table("outbox_events")));
}

std::vector<std::string> read_mark_streamed(const pg::Result& result) {
  std::vector<std::string> ids;
  ids.reserve(static_cast<std::size_t>(result.rows()));
  for (int row = 0; row < result.rows(); ++row) ids.emplace_back(result.text(row, 0));
  return ids;
}

std::string materialize_clashes(const SchemaName& schema) {
  return fmt::format(
      "SELECT i.id::text FROM unnest($1::uuid[]) AS i(id) "
      "WHERE NOT EXISTS (SELECT 1 FROM {events} e WHERE e.event_id = i.id)",
      fmt::arg("events", schema.table("outbox_events")));
}

bool table_has_rows(PGconn* conn, const SchemaName& schema) {
  const std::string sql = fmt::format("SELECT EXISTS (SELECT 1 FROM {events})::text",
                                      fmt::arg("events", schema.table("outbox_events")));
  return pg::exec(conn, sql).text(0, 0) != "false";
}

// How many of the transactions $1 (xid8 as text) this session does not see committed yet.
std::string invisible_transactions() {
  return "SELECT count(*) FROM unnest($1::text[]) AS t(xid) "
         "WHERE NOT pg_visible_in_snapshot(t.xid::xid8, pg_current_snapshot())";
}

StreamCheck read_check_streamed(const pg::Result& result) {
  StreamCheck check;
  for (int row = 0; row < result.rows(); ++row) {
    const auto position = static_cast<std::size_t>(result.int64(row, 0)) - 1;
    const std::string_view state = result.text(row, 3);
    if (result.text(row, 1) != "true") {
      check.invisible.push_back(position);
    } else if (state == "finished") {
      check.finished.push_back(position);
    } else if (result.text(row, 2) == "true" || state == "table") {
      check.blocked.push_back(position);
    }
  }
  std::sort(check.invisible.begin(), check.invisible.end());
  std::sort(check.blocked.begin(), check.blocked.end());
  std::sort(check.finished.begin(), check.finished.end());
  return check;
}

bool VisibleXmin::ended_before(std::uint32_t xid, Clock::time_point now) const {
  if (xmin_ == 0 || now - at_ >= kFresh) return false;
  // The full id nearest to xmin with these low 32 bits: transaction ids in use are within 2^31
  // of each other (PostgreSQL's wraparound rule).
  constexpr std::uint64_t kEpoch = std::uint64_t{1} << 32;
  constexpr std::uint64_t kHalf = std::uint64_t{1} << 31;
  std::uint64_t full = (xmin_ & ~(kEpoch - 1)) | xid;
  if (full > xmin_ && full - xmin_ > kHalf && full >= kEpoch) {
    full -= kEpoch;  // from the epoch before xmin's
  } else if (full < xmin_ && xmin_ - full > kHalf) {
    full += kEpoch;  // from the epoch after
  }
  return full < xmin_;
}

void VisibleXmin::refresh(PGconn* conn, Clock::time_point now) {
  static const std::string sql = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text";
  const pg::Result result = pg::exec_prepared(conn, sql);
  xmin_ = std::stoull(std::string(result.text(0, 0)));
  at_ = now;
}

std::vector<std::string> idle_slots_of(PGconn* conn, const SchemaName& schema,
                                       const std::string& base) {
  const auto slots = pg::exec(
      conn,
      "SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database() "
      "AND plugin = 'pgoutput' AND NOT active AND starts_with(slot_name::text, $1) "
      "AND slot_name::text NOT IN (SELECT slot_name FROM " +
          schema.table("outbox_table_less_slots") + ")",
      pg::Params().text(base).pointers());
  std::vector<std::string> names;
  for (int row = 0; row < slots.rows(); ++row) names.emplace_back(slots.text(row, 0));
  return names;
}

std::optional<std::string> registered_by(PGconn* conn, const SchemaName& schema,
                                         const std::string& slot) {
  const auto found = pg::exec(
      conn,
      "SELECT relay_id FROM " + schema.table("outbox_table_less_slots") + " WHERE slot_name = $1",
      pg::Params().text(slot).pointers());
  if (found.rows() == 0) return std::nullopt;
  return std::string(found.text(0, 0));
}

bool register_slot(PGconn* conn, const SchemaName& schema, const std::string& slot,
                   const std::string& relay_id) {
  const auto registered = pg::exec(
      conn,
      "INSERT INTO " + schema.table("outbox_table_less_slots") +
          " AS t (slot_name, relay_id, witness_since) VALUES ($1, $2, "
          "pg_current_wal_insert_lsn()) ON CONFLICT (slot_name) DO UPDATE SET relay_id = "
          "EXCLUDED.relay_id, witness_since = coalesce(t.witness_since, EXCLUDED.witness_since) "
          "RETURNING (t.xmax <> 0)::text",
      pg::Params().text(slot).text(relay_id).pointers());
  return registered.text(0, 0) == "true";
}

std::optional<cdc::Lsn> witness_since(PGconn* conn, const SchemaName& schema,
                                      const std::string& slot) {
  const auto since =
      pg::exec(conn,
               "SELECT witness_since::text FROM " + schema.table("outbox_table_less_slots") +
                   " WHERE slot_name = $1 AND witness_since IS NOT NULL",
               pg::Params().text(slot).pointers());
  if (since.rows() != 1) return std::nullopt;
  return cdc::parse_lsn(since.text(0, 0));
}

std::string saved_position(PGconn* conn, const SchemaName& schema, const std::string& slot,
                           const std::string& system_id) {
  const auto saved = pg::exec(conn,
                              "SELECT coalesce(confirmed_lsn::text, '') FROM " +
                                  schema.table("outbox_table_less_slots") +
                                  " WHERE slot_name = $1 AND confirmed_system = $2",
                              pg::Params().text(slot).text(system_id).pointers());
  if (saved.rows() == 0) return "";
  return std::string(saved.text(0, 0));
}

void save_position(PGconn* conn, const SchemaName& schema, const std::string& slot, cdc::Lsn lsn,
                   const std::string& system_id) {
  pg::exec(conn,
           "WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)) UPDATE " +
               schema.table("outbox_table_less_slots") +
               " SET confirmed_lsn = CASE WHEN confirmed_system = $3 THEN "
               "greatest(coalesce(confirmed_lsn, '0/0'), $2::pg_lsn) ELSE $2::pg_lsn END, "
               "confirmed_system = $3 FROM durable WHERE slot_name = $1",
           pg::Params().text(slot).text(cdc::format_lsn(lsn)).text(system_id).pointers());
}

}  // namespace outbox::cdc_sql
