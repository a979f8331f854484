// What `outbox inbox` and `outbox status` read and write of the gap-aware inbox's held events.

#include <fmt/format.h>

#include "ops/audit_text.hpp"
#include "outbox/inbox_admin.hpp"
#include "pg/connection.hpp"
#include "schema/inbox_tables.hpp"

namespace outbox {
namespace {

// Columns:                0              1         2               3
constexpr const char* kList = R"SQL(
SELECT p.consumer_name, p.event_id, p.aggregate_type, p.aggregate_id,
--       4                     5             6                 7       8
       p.aggregate_sequence, p.event_type, p.schema_version, p.kind, {is_parked},
--       9         10
       p.reason, to_char(p.held_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"'),
--       11                         12
       coalesce(p.decision, ''), coalesce(p.decided_by, '')
FROM {parked} p
WHERE $1 = '' OR p.consumer_name = $1
ORDER BY 9 DESC, p.held_at, p.consumer_name, p.event_id
LIMIT $2)SQL";

constexpr const char* kCount = R"SQL(
SELECT consumer_name,
       count(*) FILTER (WHERE NOT {is_parked}),
       count(*) FILTER (WHERE {is_parked})
FROM {parked} GROUP BY consumer_name ORDER BY consumer_name)SQL";

constexpr const char* kDecide = R"SQL(
WITH decided AS (
  UPDATE {parked} SET decision = $3, decided_by = $4
  WHERE consumer_name = $1 AND event_id = $2::uuid AND decision IS NULL
  RETURNING consumer_name, event_id
)
INSERT INTO {audit} (event_id, action, actor, reason, consumer_name)
SELECT event_id, $5, $4, $6, consumer_name FROM decided
RETURNING event_id)SQL";

std::string sql(const char* text, const SchemaName& schema) {
  return fmt::format(fmt::runtime(text), fmt::arg("parked", schema.table("inbox_parked")),
                     fmt::arg("audit", schema.table("outbox_operator_audit")),
                     fmt::arg("is_parked", detail::kHeldIsParked));
}

// Whether the schema has the gap-aware inbox's tables: `outbox status` and the admin page of this
// build read a schema not migrated to 19 yet.
bool has_inbox_tables(PGconn* conn, const SchemaName& schema) {
  return pg::exec(conn, "SELECT to_regclass($1) IS NOT NULL",
                  {schema.table("inbox_parked").c_str()})
             .text(0, 0) == "t";
}

}  // namespace

std::vector<HeldEvent> list_held(PGconn* conn, const SchemaName& schema,
                                 const std::string& consumer_name, std::size_t limit) {
  if (!has_inbox_tables(conn, schema)) return {};
  const std::string limit_text = std::to_string(limit);
  const auto rows = pg::exec(conn, sql(kList, schema), {consumer_name.c_str(), limit_text.c_str()});
  std::vector<HeldEvent> held;
  for (int row = 0; row < rows.rows(); ++row) {
    HeldEvent e;
    e.consumer_name = rows.text(row, 0);
    e.event_id = EventId::parse(rows.text(row, 1)).value_or(EventId{});
    e.aggregate_type = rows.text(row, 2);
    e.aggregate_id = rows.text(row, 3);
    e.aggregate_sequence = rows.int64(row, 4);
    e.event_type = rows.text(row, 5);
    e.schema_version = static_cast<std::int32_t>(rows.int64(row, 6));
    e.kind = rows.text(row, 7);
    e.parked = rows.text(row, 8) == "t";
    e.reason = rows.text(row, 9);
    e.held_at = rows.text(row, 10);
    e.decision = rows.text(row, 11);
    e.decided_by = rows.text(row, 12);
    held.push_back(std::move(e));
  }
  return held;
}

std::vector<HeldCount> count_held(PGconn* conn, const SchemaName& schema) {
  if (!has_inbox_tables(conn, schema)) return {};
  const auto rows = pg::exec(conn, sql(kCount, schema));
  std::vector<HeldCount> counts;
  for (int row = 0; row < rows.rows(); ++row) {
    counts.push_back({std::string(rows.text(row, 0)), rows.int64(row, 1), rows.int64(row, 2)});
  }
  return counts;
}

void decide_held(PGconn* conn, const SchemaName& schema, const std::string& consumer_name,
                 const EventId& event_id, HeldDecision decision, const std::string& actor,
                 const std::string& reason) {
  const char* verb = decision == HeldDecision::release ? "release" : "skip";
  const std::string command = std::string("inbox ") + verb;
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(command + ": the connection must be idle (it runs one transaction)");
  }
  if (actor.empty()) throw InvalidArgument(command + ": the actor is empty; say who does this");
  detail::check_audit_text(command, "actor", actor);
  detail::check_audit_text(command, "reason", reason);
  if (decision == HeldDecision::skip && reason.empty()) {
    throw InvalidArgument(
        "inbox skip needs a reason: the event's effect never runs at this consumer, and the "
        "audit record must say why");
  }
  const std::string id = event_id.to_string();
  const std::string action = std::string("inbox_") + verb;
  // One statement: the decision and its audit row commit together or not at all.
  const auto decided = pg::exec(
      conn, sql(kDecide, schema),
      {consumer_name.c_str(), id.c_str(), verb, actor.c_str(), action.c_str(), reason.c_str()});
  if (decided.rows() != 1) {
    throw InvalidArgument(fmt::format(
        "{}: event {} is not held by consumer '{}', or already has a decision (see `outbox "
        "inbox list`); nothing was changed",
        command, id, detail::printable(consumer_name)));
  }
}

}  // namespace outbox
