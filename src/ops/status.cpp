#include "outbox/status.hpp"

#include <string>

#include "outbox/error.hpp"
#include "pg/connection.hpp"

namespace outbox {

namespace {

std::optional<std::int64_t> optional_int(const pg::Result& r, int row, int column) {
  if (r.is_null(row, column)) return std::nullopt;
  return r.int64(row, column);
}

}  // namespace

std::string_view RelaySessionStatus::state() const {
  if (ended) return "ended";
  if (seen_seconds_ago > 30) return "silent";
  return listening ? "waiting for work" : "working";
}

std::vector<RelaySessionStatus> read_relay_sessions(PGconn* conn, const SchemaName& schema,
                                                    int limit) {
  if (limit < 0) {
    throw InvalidArgument("read_relay_sessions: a limit of " + std::to_string(limit) +
                          " sessions; give 0 or more");
  }
  const std::string limit_text = std::to_string(limit);
  const auto rows =
      pg::exec(conn,
               "SELECT relay_id, listening::text, "
               // An ended session's seen_at is -infinity: no age (PostgreSQL 15 refuses the sum).
               "CASE WHEN isfinite(seen_at) THEN extract(epoch FROM now() - seen_at)::float8::text "
               "ELSE '-1' END, (ended_at IS NOT NULL)::text FROM " +
                   schema.table("outbox_relays") + " ORDER BY seen_at DESC LIMIT $1::int",
               {limit_text.c_str()});
  std::vector<RelaySessionStatus> out;
  for (int row = 0; row < rows.rows(); ++row) {
    out.push_back({std::string(rows.text(row, 0)), rows.text(row, 1) == "true",
                   std::stod(std::string(rows.text(row, 2))), rows.text(row, 3) == "true"});
  }
  return out;
}

OutboxStatus read_status(PGconn* conn, const SchemaName& schema) {
  OutboxStatus status;
  const std::string events = schema.table("outbox_events");
  const auto counts = pg::exec(
      conn,
      "WITH pending AS (SELECT * FROM " + events +
          " WHERE published_at IS NULL AND skipped_at IS NULL)"
          " SELECT (SELECT count(*) FROM pending),"
          "        (SELECT count(*) FROM pending WHERE claim_until > now()),"
          "        (SELECT count(*) FROM pending WHERE attempt_count > 0 AND quarantined_at IS "
          "NULL),"
          "        (SELECT count(*) FROM pending WHERE quarantined_at IS NOT NULL),"
          "        (SELECT count(*) FROM " +
          events +
          " WHERE published_at IS NOT NULL),"
          "        (SELECT count(*) FROM " +
          events +
          " WHERE skipped_at IS NOT NULL),"
          "        (SELECT coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8"
          "         FROM pending)");
  status.pending = counts.int64(0, 0);
  status.in_flight = counts.int64(0, 1);
  status.retrying = counts.int64(0, 2);
  status.quarantined = counts.int64(0, 3);
  status.published = counts.int64(0, 4);
  status.skipped = counts.int64(0, 5);
  status.oldest_pending_seconds = std::stod(std::string(counts.text(0, 6)));

  // With the WAL each holds back: what `--wal-budget` and max_slot_wal_keep_size bound.
  const auto slots = pg::exec(
      conn,
      "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
      "ELSE pg_current_wal_lsn() END AS lsn) "
      "SELECT slot_name, coalesce(active_pid::text, ''), coalesce(wal_status, ''), "
      "pg_wal_lsn_diff(here.lsn, restart_lsn)::bigint, "
      "pg_wal_lsn_diff(here.lsn, confirmed_flush_lsn)::bigint, "
      "(slot_name::text IN (SELECT slot_name FROM " +
          schema.table("outbox_table_less_slots") +
          "))::text "
          "FROM pg_replication_slots, here WHERE slot_type = 'logical' AND plugin = 'pgoutput' "
          "AND database = current_database() ORDER BY slot_name");
  for (int row = 0; row < slots.rows(); ++row) {
    status.slots.push_back({std::string(slots.text(row, 0)), std::string(slots.text(row, 1)),
                            std::string(slots.text(row, 2)), optional_int(slots, row, 3),
                            optional_int(slots, row, 4), slots.text(row, 5) == "true"});
  }
  status.relays = read_relay_sessions(conn, schema);
  return status;
}

}  // namespace outbox
