#include "outbox/quarantine.hpp"

#include <fmt/format.h>

#include "ops/audit_text.hpp"
#include "ops/not_in_state.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

void check_actor(const std::string& actor) {
  if (actor.empty()) {
    throw InvalidArgument("an operator action needs an actor (who did it) for the audit record");
  }
  detail::check_audit_text("quarantine", "actor", actor);
}

void check_idle(PGconn* conn) {
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(
        "quarantine actions need an idle connection; they run their own transaction");
  }
}

}  // namespace

std::vector<QuarantinedEvent> list_quarantined(PGconn* conn, const SchemaName& schema,
                                               std::size_t limit) {
  const std::string limit_text = std::to_string(limit);
  const auto result = pg::exec(
      conn,
      fmt::format(R"SQL(SELECT q.event_id, q.aggregate_type, q.aggregate_id, q.aggregate_sequence,
       q.event_type, q.attempt_count, coalesce(q.quarantine_reason, ''), coalesce(q.last_error, ''),
       q.quarantined_at,
       (SELECT count(*) FROM {events} b
        WHERE b.published_at IS NULL AND b.skipped_at IS NULL
          AND b.aggregate_type = q.aggregate_type AND b.aggregate_id = q.aggregate_id
          AND b.aggregate_sequence > q.aggregate_sequence)
FROM {events} q
WHERE q.quarantined_at IS NOT NULL AND q.published_at IS NULL AND q.skipped_at IS NULL
ORDER BY q.quarantined_at
LIMIT $1::bigint)SQL",
                  fmt::arg("events", schema.table("outbox_events"))),
      {limit_text.c_str()});
  std::vector<QuarantinedEvent> events;
  for (int row = 0; row < result.rows(); ++row) {
    QuarantinedEvent e;
    e.event_id = EventId::parse(result.text(row, 0)).value_or(EventId{});
    e.aggregate_type = result.text(row, 1);
    e.aggregate_id = result.text(row, 2);
    e.aggregate_sequence = result.int64(row, 3);
    e.event_type = result.text(row, 4);
    e.attempt_count = static_cast<std::int32_t>(result.int64(row, 5));
    e.reason = result.text(row, 6);
    e.last_error = result.text(row, 7);
    e.quarantined_at = result.text(row, 8);
    e.blocked_events = result.int64(row, 9);
    events.push_back(std::move(e));
  }
  return events;
}

std::size_t retry_quarantined(PGconn* conn, const SchemaName& schema,
                              std::span<const EventId> event_ids, const std::string& actor,
                              std::vector<EventId>* released_ids) {
  check_actor(actor);
  check_idle(conn);
  const std::string ids = pg::uuid_array(event_ids);
  pg::exec(conn, "BEGIN");
  try {
    const auto released =
        pg::exec(conn,
                 fmt::format(R"SQL(WITH released AS (
  UPDATE {events}
  SET quarantined_at = NULL, quarantine_reason = NULL, attempt_count = 0, available_at = now()
  WHERE event_id = ANY ($1::uuid[]) AND quarantined_at IS NOT NULL
    AND published_at IS NULL AND skipped_at IS NULL
  RETURNING event_id
)
INSERT INTO {audit} (event_id, action, actor, reason)
SELECT event_id, 'retry', $2, 'released from quarantine' FROM released
RETURNING event_id)SQL",
                             fmt::arg("events", schema.table("outbox_events")),
                             fmt::arg("audit", schema.table("outbox_operator_audit"))),
                 {ids.c_str(), actor.c_str()});
    pg::commit(conn);
    if (released_ids != nullptr) {
      for (int row = 0; row < released.rows(); ++row) {
        released_ids->push_back(EventId::parse(released.text(row, 0)).value_or(EventId{}));
      }
    }
    return static_cast<std::size_t>(released.rows());
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

std::vector<std::string> not_quarantined(PGconn* conn, const SchemaName& schema,
                                         std::span<const EventId> event_ids) {
  return detail::not_in_state(conn, schema, event_ids, "quarantined_at",
                              "pending, not quarantined");
}

std::vector<std::string> detail::not_in_state(PGconn* conn, const SchemaName& schema,
                                              std::span<const EventId> event_ids,
                                              const char* state_column, const char* pending) {
  const std::string ids = pg::uuid_array(event_ids);
  const auto result = pg::exec(conn,
                               fmt::format(R"SQL(SELECT id, why FROM (
SELECT w.n, w.id::text AS id,
       CASE WHEN e.event_id IS NULL THEN 'not found'
            WHEN e.published_at IS NOT NULL
              THEN 'published at ' || to_char(e.published_at AT TIME ZONE 'UTC',
                                              'YYYY-MM-DD HH24:MI:SS"Z"')
            WHEN e.skipped_at IS NOT NULL
              THEN 'skipped at ' || to_char(e.skipped_at AT TIME ZONE 'UTC',
                                            'YYYY-MM-DD HH24:MI:SS"Z"')
            WHEN e.{state} IS NULL THEN $2
       END AS why
FROM unnest($1::uuid[]) WITH ORDINALITY AS w(id, n)
LEFT JOIN {events} e ON e.event_id = w.id) AS named
WHERE why IS NOT NULL
ORDER BY n)SQL",
                                           fmt::arg("events", schema.table("outbox_events")),
                                           fmt::arg("state", state_column)),
                               {ids.c_str(), pending});
  std::vector<std::string> lines;
  for (int row = 0; row < result.rows(); ++row) {
    lines.push_back(fmt::format("{}: {}", result.text(row, 0), result.text(row, 1)));
  }
  return lines;
}

void skip_quarantined(PGconn* conn, const SchemaName& schema, const EventId& event_id,
                      const std::string& actor, const std::string& reason) {
  check_actor(actor);
  check_idle(conn);
  if (reason.empty()) {
    throw InvalidArgument(
        "skipping an event needs a reason: it is never published, and the "
        "audit record must say why");
  }
  detail::check_audit_text("quarantine skip", "reason", reason);
  const std::string id = event_id.to_string();
  pg::exec(conn, "BEGIN");
  try {
    const auto skipped =
        pg::exec(conn,
                 fmt::format(R"SQL(WITH skipped AS (
  UPDATE {events} SET skipped_at = now(), claimed_by = NULL, claim_until = NULL
  WHERE event_id = $1::uuid AND quarantined_at IS NOT NULL
    AND published_at IS NULL AND skipped_at IS NULL
  RETURNING event_id
)
INSERT INTO {audit} (event_id, action, actor, reason)
SELECT event_id, 'skip', $2, $3 FROM skipped
RETURNING event_id)SQL",
                             fmt::arg("events", schema.table("outbox_events")),
                             fmt::arg("audit", schema.table("outbox_operator_audit"))),
                 {id.c_str(), actor.c_str(), reason.c_str()});
    if (skipped.rows() != 1) {
      throw InvalidArgument(
          "event " + id +
          " is not quarantined (unknown, already published, skipped or released): "
          "nothing was skipped");
    }
    pg::commit(conn);
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

}  // namespace outbox
