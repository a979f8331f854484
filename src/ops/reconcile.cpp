#include "outbox/reconcile.hpp"

#include <fmt/format.h>

#include "ops/audit_text.hpp"
#include "ops/not_in_state.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {

const char* to_string(Settlement settlement) noexcept {
  switch (settlement) {
    case Settlement::published:
      return "published";
    case Settlement::retry:
      return "retry";
    case Settlement::skip:
      return "skip";
  }
  return "?";
}

std::vector<InDoubtEvent> list_in_doubt(PGconn* conn, const SchemaName& schema, std::size_t limit,
                                        bool with_body) {
  const std::string limit_text = std::to_string(limit);
  const char* body = with_body ? "true" : "false";
  const auto result = pg::exec(
      conn,
      fmt::format(R"SQL(SELECT q.event_id, q.aggregate_type, q.aggregate_id, q.aggregate_sequence,
       q.event_type, q.schema_version, CASE WHEN $2::bool THEN q.payload::text ELSE '' END,
       CASE WHEN $2::bool THEN q.headers::text ELSE '{{}}' END, q.occurred_at,
       q.attempt_count, q.in_doubt_at, coalesce(q.in_doubt_reason, ''),
       extract(epoch FROM now() - q.in_doubt_at),
       (SELECT count(*) FROM {events} b
        WHERE b.published_at IS NULL AND b.skipped_at IS NULL
          AND b.aggregate_type = q.aggregate_type AND b.aggregate_id = q.aggregate_id
          AND b.aggregate_sequence > q.aggregate_sequence)
FROM {events} q
WHERE q.in_doubt_at IS NOT NULL AND q.published_at IS NULL AND q.skipped_at IS NULL
ORDER BY q.in_doubt_at
LIMIT $1::bigint)SQL",
                  fmt::arg("events", schema.table("outbox_events"))),
      {limit_text.c_str(), body});
  std::vector<InDoubtEvent> events;
  for (int row = 0; row < result.rows(); ++row) {
    InDoubtEvent e;
    e.event.event_id = EventId::parse(result.text(row, 0)).value_or(EventId{});
    e.event.aggregate_type = result.text(row, 1);
    e.event.aggregate_id = result.text(row, 2);
    e.event.aggregate_sequence = result.int64(row, 3);
    e.event.event_type = result.text(row, 4);
    e.event.schema_version = static_cast<std::int32_t>(result.int64(row, 5));
    e.event.payload = result.text(row, 6);
    e.event.headers = result.text(row, 7);
    e.event.occurred_at = result.text(row, 8);
    e.event.attempt_count = static_cast<std::int32_t>(result.int64(row, 9));
    e.in_doubt_at = result.text(row, 10);
    e.reason = result.text(row, 11);
    e.age_seconds = std::stod(std::string(result.text(row, 12)));
    e.blocked_events = result.int64(row, 13);
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<EventId> settle_in_doubt(PGconn* conn, const SchemaName& schema,
                                     std::span<const EventId> event_ids, Settlement settlement,
                                     const std::string& actor, const std::string& reason) {
  if (actor.empty()) {
    throw InvalidArgument("reconcile needs an actor (who decided) for the audit record");
  }
  if (reason.empty()) {
    throw InvalidArgument(
        "reconcile needs a reason: the audit record says on what ground the event was settled "
        "(\"the provider's dashboard shows charge ch_123\")");
  }
  detail::check_audit_text("reconcile", "actor", actor);
  detail::check_audit_text("reconcile", "reason", reason);
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument("reconcile needs an idle connection; it runs its own transaction");
  }
  const std::string ids = pg::uuid_array(event_ids);
  const std::string what = to_string(settlement);
  pg::exec(conn, "BEGIN");
  try {
    const auto settled =
        pg::exec(conn,
                 fmt::format(R"SQL(WITH settled AS (
  UPDATE {events}
  SET in_doubt_at = NULL, in_doubt_reason = NULL, claimed_by = NULL, claim_until = NULL,
      published_at = CASE WHEN $3 = 'published' THEN now() END,
      skipped_at = CASE WHEN $3 = 'skip' THEN now() END,
      attempt_count = CASE WHEN $3 = 'retry' THEN 0 ELSE attempt_count END,
      available_at = CASE WHEN $3 = 'retry' THEN now() ELSE available_at END
  WHERE event_id = ANY ($1::uuid[]) AND in_doubt_at IS NOT NULL
    AND published_at IS NULL AND skipped_at IS NULL
  RETURNING event_id
)
INSERT INTO {audit} (event_id, action, actor, reason)
SELECT event_id, 'reconcile_' || $3, $2, $4 FROM settled
RETURNING event_id)SQL",
                             fmt::arg("events", schema.table("outbox_events")),
                             fmt::arg("audit", schema.table("outbox_operator_audit"))),
                 {ids.c_str(), actor.c_str(), what.c_str(), reason.c_str()});
    pg::commit(conn);
    std::vector<EventId> out;
    for (int row = 0; row < settled.rows(); ++row) {
      out.push_back(EventId::parse(settled.text(row, 0)).value_or(EventId{}));
    }
    return out;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

std::vector<std::string> not_in_doubt(PGconn* conn, const SchemaName& schema,
                                      std::span<const EventId> event_ids) {
  return detail::not_in_state(conn, schema, event_ids, "in_doubt_at", "pending, not in doubt");
}

}  // namespace outbox
