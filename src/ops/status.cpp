#include "outbox/status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "cdc/slot_admin.hpp"
#include "ops/backlog_sql.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "pg/params.hpp"

namespace outbox {

std::string_view RelaySessionStatus::state() const {
  if (ended) return "ended";
  if (seen_seconds_ago > 30) return "silent";
  return listening ? "waiting for work" : "working";
}

std::string RelaySessionStatus::slot_role() const {
  if (ended || slot.empty()) return {};
  if (slot_mode == "streaming") {
    return slot_streamed ? "streams slot " + slot
                         : "says it streams slot " + slot + ", but pg_replication_slots disagrees";
  }
  if (slot_mode == "standby") return "standby for slot " + slot;
  if (slot_mode == "released") return "let slot " + slot + " go, publishes from the table";
  return "slot " + slot + " (" + slot_mode + ")";
}

std::vector<RelaySessionStatus> read_relay_sessions(PGconn* conn, const SchemaName& schema,
                                                    int limit) {
  if (limit < 0) {
    throw InvalidArgument("read_relay_sessions: a limit of " + std::to_string(limit) +
                          " sessions; give 0 or more");
  }
  enum Column : int {
    kId,
    kListening,
    kSeenAgo,
    kEnded,
    kSlot,
    kSlotMode,
    kStreamed,
    kPublished,
    kHealth
  };
  // A streaming session counts as such only when the slot's walsender is the one its row names
  // (the row is the relay's word; pg_replication_slots is the server's).
  const auto rows = pg::exec(conn,
                             fmt::format(R"SQL(
SELECT r.relay_id, r.listening::text,
       -- An ended session's seen_at is -infinity: no age (PostgreSQL 15 refuses the sum).
       CASE WHEN isfinite(r.seen_at) THEN extract(epoch FROM now() - r.seen_at)::float8::text
            ELSE '-1' END,
       (r.ended_at IS NOT NULL)::text, coalesce(r.slot_name, ''), coalesce(r.slot_mode, ''),
       EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s
               WHERE s.slot_name = r.slot_name AND s.database = current_database()
                 AND s.active_pid = r.walsender_pid)::text,
       -- Migration 17's columns read by name from the row's JSON: an `outbox admin` or `status`
       -- of this build against a schema not migrated yet reads 0 and '' instead of failing.
       coalesce((to_jsonb(r)->>'published')::bigint, 0), coalesce(to_jsonb(r)->>'health', '')
FROM {relays} r ORDER BY r.seen_at DESC LIMIT $1::int)SQL",
                                         fmt::arg("relays", schema.table("outbox_relays"))),
                             pg::Params().integer(limit).pointers());
  std::vector<RelaySessionStatus> out;
  for (int row = 0; row < rows.rows(); ++row) {
    RelaySessionStatus session;
    session.relay_id = rows.text(row, kId);
    session.listening = rows.text(row, kListening) == "true";
    session.seen_seconds_ago = std::stod(std::string(rows.text(row, kSeenAgo)));
    session.ended = rows.text(row, kEnded) == "true";
    session.slot = rows.text(row, kSlot);
    session.slot_mode = rows.text(row, kSlotMode);
    session.slot_streamed = rows.text(row, kStreamed) == "true";
    session.published = rows.int64(row, kPublished);
    session.health = rows.text(row, kHealth);
    out.push_back(std::move(session));
  }
  return out;
}

namespace {

// Pending, quarantined and the oldest wait by the backlog query's rules (ops/backlog_sql.hpp),
// the admin page's and the gauges' own; the rest by one pass over the table.
void read_counts(PGconn* conn, const SchemaName& schema, OutboxStatus& status) {
  const auto backlog = pg::exec(conn, detail::backlog_sql(schema));
  for (int row = 0; row < backlog.rows(); ++row) {
    if (backlog.text(row, 0) != "type") continue;
    status.pending += backlog.int64(row, 3);
    status.oldest_pending_seconds =
        std::max(status.oldest_pending_seconds, std::stod(std::string(backlog.text(row, 4))));
    status.quarantined += backlog.int64(row, 5);
    status.in_doubt += backlog.int64(row, 6);
  }
  const auto counts =
      pg::exec(conn, fmt::format(R"SQL(
SELECT count(*) FILTER (WHERE claim_until > now() AND quarantined_at IS NULL
                          AND published_at IS NULL AND skipped_at IS NULL),
       count(*) FILTER (WHERE attempt_count > 0 AND quarantined_at IS NULL AND in_doubt_at IS NULL
                          AND published_at IS NULL AND skipped_at IS NULL),
       count(*) FILTER (WHERE published_at IS NOT NULL),
       count(*) FILTER (WHERE skipped_at IS NOT NULL)
FROM {events})SQL",
                                 fmt::arg("events", schema.table("outbox_events"))));
  status.in_flight = counts.int64(0, 0);
  status.retrying = counts.int64(0, 1);
  status.published = counts.int64(0, 2);
  status.skipped = counts.int64(0, 3);
}

// With the WAL each holds back: what `--wal-budget` and max_slot_wal_keep_size bound.
std::vector<SlotStatus> read_slots(PGconn* conn, const SchemaName& schema) {
  const auto registered =
      pg::exec(conn, "SELECT slot_name FROM " + schema.table("outbox_table_less_slots"));
  std::vector<SlotStatus> out;
  for (const cdc::ServerSlot& found : cdc::our_slots(conn)) {
    SlotStatus slot;
    slot.name = found.name;
    slot.walsender = found.walsender == 0 ? "" : std::to_string(found.walsender);
    slot.wal_status = found.wal_status;
    slot.retained = found.retained_bytes;
    slot.unconfirmed = found.unconfirmed_bytes;
    for (int row = 0; row < registered.rows(); ++row) {
      slot.table_less = slot.table_less || registered.text(row, 0) == found.name;
    }
    out.push_back(std::move(slot));
  }
  return out;
}

}  // namespace

OutboxStatus read_status(PGconn* conn, const SchemaName& schema) {
  OutboxStatus status;
  // One snapshot for every statement (on an idle connection): in flight never more than pending.
  const bool own_transaction = PQtransactionStatus(conn) == PQTRANS_IDLE;
  if (own_transaction) pg::exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  try {
    read_counts(conn, schema, status);
    status.slots = read_slots(conn, schema);
    status.relays = read_relay_sessions(conn, schema);
    status.inbox_held = count_held(conn, schema);
    if (own_transaction) pg::commit(conn);
  } catch (...) {
    if (own_transaction) pg::rollback_quietly(conn);
    throw;
  }
  for (SlotStatus& slot : status.slots) {
    for (const RelaySessionStatus& relay : status.relays) {
      if (relay.ended || relay.slot != slot.name) continue;
      if (relay.slot_mode == "streaming" && relay.slot_streamed) slot.streamed_by = relay.relay_id;
      if (relay.slot_mode == "standby") slot.standbys.push_back(relay.relay_id);
    }
  }
  return status;
}

}  // namespace outbox
