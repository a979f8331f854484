#include "outbox/roles.hpp"

#include <fmt/format.h>

#include "pg/connection.hpp"

namespace outbox {
namespace {

// Each role's privileges. Column lists where a role needs a column, not the row: a writer learns
// its event's id and sequence (RETURNING) and resolve_commit finds an id, but never reads
// payloads. The notify trigger runs with the writer's rights, so writers read outbox_relays.
//
// What each role may write is cut to the columns its program writes, so none can rewrite what it
// does not own (42501; tests/integration/roles_pgtest.cpp): a writer inserts an event's content
// and delivery time, never its claim, attempts or publication, and moves a counter only by its
// value (which migration 13's trigger lets only rise); a relay changes only the claim, failure and
// publication columns, never a payload; an admin changes only the state that quarantine, skip
// and replay change, never an event's content, and writes audit rows without their db_user and
// time (the server sets them). The cleanup horizon only rises (migration 13).
constexpr const char* kGrants = R"SQL(
REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {writer}, {relay}, {inbox}, {admin};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {writer}, {relay}, {inbox}, {admin};
GRANT USAGE ON SCHEMA {s} TO {writer}, {relay}, {inbox}, {admin};

GRANT INSERT (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
              schema_version, payload, headers, available_at) ON {s}.outbox_events TO {writer};
GRANT SELECT (event_id, aggregate_sequence, published_at, quarantined_at, skipped_at, in_doubt_at)
  ON {s}.outbox_events TO {writer};
GRANT SELECT, INSERT (aggregate_type, aggregate_id, last_sequence), UPDATE (last_sequence)
  ON {s}.outbox_aggregate_sequences TO {writer};
GRANT SELECT ON {s}.outbox_relays, {s}.outbox_cleanup_horizon, {s}.outbox_table_less_slots
  TO {writer};
-- The producer as a SQL function (migration 16) and the helpers it calls (granted too: a database
-- whose default privileges take EXECUTE from PUBLIC); it runs with the caller's rights, above.
GRANT EXECUTE ON FUNCTION {s}.enqueue(text, text, text, jsonb, jsonb, integer, interval, uuid, text),
  {s}.outbox_check_name(text, text), {s}.outbox_hostile_pattern(),
  {s}.outbox_kafka_header_bytes(bigint, bigint) TO {writer};

-- INSERT: a table-less event the stream cannot publish at once is written to the table.
GRANT SELECT, INSERT (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
                      schema_version, payload, headers, occurred_at, available_at),
  UPDATE (claimed_by, claim_until, published_at, attempt_count, last_error, available_at,
          quarantined_at, quarantine_reason, in_doubt_at, in_doubt_reason)
  ON {s}.outbox_events TO {relay};
GRANT SELECT, INSERT, UPDATE ON {s}.outbox_table_less_slots TO {relay};
GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.outbox_relays TO {relay};
GRANT SELECT ON {s}.outbox_schema_migrations TO {relay};

GRANT SELECT, INSERT (consumer_name, event_id) ON {s}.processed_events TO {inbox};
GRANT SELECT ON {s}.outbox_inbox_consumers TO {inbox};
GRANT SELECT, INSERT, UPDATE (last_sequence) ON {s}.inbox_aggregates TO {inbox};
GRANT SELECT, INSERT, DELETE, UPDATE (reason, kind, park_at, decision, decided_by)
  ON {s}.inbox_parked TO {inbox};

GRANT SELECT, UPDATE (published_at, claimed_by, claim_until, attempt_count, last_error,
                      available_at, quarantined_at, quarantine_reason, skipped_at, in_doubt_at,
                      in_doubt_reason), DELETE
  ON {s}.outbox_events TO {admin};
GRANT SELECT, INSERT (event_id, action, actor, reason) ON {s}.outbox_operator_audit TO {admin};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {admin};
GRANT SELECT, DELETE ON {s}.processed_events TO {admin};
GRANT SELECT, INSERT (deleted_before), UPDATE (deleted_before)
  ON {s}.outbox_cleanup_horizon TO {admin};
GRANT SELECT ON {s}.outbox_relays, {s}.outbox_aggregate_sequences,
  {s}.outbox_schema_migrations, {s}.outbox_inbox_consumers TO {admin};
GRANT SELECT, DELETE ON {s}.outbox_table_less_slots TO {admin};
GRANT SELECT ON {s}.inbox_aggregates TO {admin};
GRANT SELECT, UPDATE (decision, decided_by) ON {s}.inbox_parked TO {admin};
GRANT INSERT (consumer_name) ON {s}.outbox_operator_audit TO {admin};

-- Consumer names listed in outbox_inbox_consumers belong to their role (migration 13): another
-- role's row under such a name is neither written nor seen. Unlisted names stay open to every
-- role with the table's privileges. The admin's cleanup sees and deletes every row. The owner
-- (and a superuser) pass row-level security.
DROP POLICY IF EXISTS outbox_consumer_names ON {s}.processed_events;
CREATE POLICY outbox_consumer_names ON {s}.processed_events
  USING ({may_use}) WITH CHECK ({may_use});
DROP POLICY IF EXISTS outbox_admin_cleanup ON {s}.processed_events;
CREATE POLICY outbox_admin_cleanup ON {s}.processed_events TO {admin} USING (true);
ALTER TABLE {s}.processed_events ENABLE ROW LEVEL SECURITY;
-- The gap-aware inbox's tables (migration 19) under the same rule; the admin sees and decides.
DROP POLICY IF EXISTS outbox_consumer_names ON {s}.inbox_aggregates;
CREATE POLICY outbox_consumer_names ON {s}.inbox_aggregates
  USING ({may_use_aggregates}) WITH CHECK ({may_use_aggregates});
DROP POLICY IF EXISTS outbox_admin_read ON {s}.inbox_aggregates;
CREATE POLICY outbox_admin_read ON {s}.inbox_aggregates TO {admin} USING (true);
ALTER TABLE {s}.inbox_aggregates ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS outbox_consumer_names ON {s}.inbox_parked;
CREATE POLICY outbox_consumer_names ON {s}.inbox_parked
  USING ({may_use_parked}) WITH CHECK ({may_use_parked});
DROP POLICY IF EXISTS outbox_admin_decide ON {s}.inbox_parked;
CREATE POLICY outbox_admin_decide ON {s}.inbox_parked TO {admin} USING (true);
ALTER TABLE {s}.inbox_parked ENABLE ROW LEVEL SECURITY;
)SQL";

// The policy's test for a processed_events row: its consumer name is unlisted, or listed for a
// role the current user is a member of (a login granted it, or the role itself). A listed role
// that does not exist admits nobody. One primary-key probe per row and a catalog-cache lookup
// (to_regrole): +5 us per inserted row against no policy (20,000 single-row inserts; joining
// pg_roles, a view that also reads pg_db_role_setting, cost +16 us). to_regrole parses an
// identifier (folds case, reads a '.'): the name is quoted first, so it is matched as written.
constexpr const char* kMayUseConsumerName = R"SQL(coalesce((
    SELECT coalesce(pg_catalog.pg_has_role(current_user,
                      pg_catalog.to_regrole(pg_catalog.quote_ident(c.role_name)), 'MEMBER'), false)
    FROM {s}.outbox_inbox_consumers c
    WHERE c.consumer_name = {table}.consumer_name), true))SQL";

std::string quoted(const std::string& identifier) { return '"' + identifier + '"'; }

}  // namespace

RoleNames role_names(const SchemaName& schema) {
  const std::string& s = schema.name();
  return {s + "_writer", s + "_relay", s + "_inbox", s + "_admin"};
}

RoleNames create_roles(PGconn* conn, const SchemaName& schema) {
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument("create_roles needs an idle connection: it runs one transaction");
  }
  const RoleNames roles = role_names(schema);
  pg::exec(conn, "BEGIN");
  try {
    // The policies need processed_events' ACCESS EXCLUSIVE lock: waiting behind a consumer's long
    // transaction would hold every inbox insert queued behind this request meanwhile.
    pg::exec(conn, "SET LOCAL lock_timeout = '5s'");
    const auto version = pg::exec(
        conn, "SELECT coalesce(max(version), 0) FROM " + schema.table("outbox_schema_migrations"));
    if (version.int64(0, 0) != latest_schema_version()) {
      throw Error(fmt::format(
          "create_roles: schema {} is at version {}, this build grants on version {}; run "
          "`outbox migrate` first",
          schema.name(), version.int64(0, 0), latest_schema_version()));
    }
    for (const std::string* role : {&roles.writer, &roles.relay, &roles.inbox, &roles.admin}) {
      // CREATE ROLE has no IF NOT EXISTS; the lookup and the create run in this transaction.
      if (pg::exec(conn, "SELECT count(*) FROM pg_roles WHERE rolname = $1", {role->c_str()})
              .int64(0, 0) == 0) {
        pg::exec(conn, "CREATE ROLE " + quoted(*role) + " NOLOGIN");
      }
    }
    const auto may_use = [&schema](const char* table) {
      return fmt::format(kMayUseConsumerName, fmt::arg("s", schema.quoted()),
                         fmt::arg("table", table));
    };
    pg::exec(conn, fmt::format(kGrants, fmt::arg("s", schema.quoted()),
                               fmt::arg("may_use", may_use("processed_events")),
                               fmt::arg("may_use_aggregates", may_use("inbox_aggregates")),
                               fmt::arg("may_use_parked", may_use("inbox_parked")),
                               fmt::arg("writer", quoted(roles.writer)),
                               fmt::arg("relay", quoted(roles.relay)),
                               fmt::arg("inbox", quoted(roles.inbox)),
                               fmt::arg("admin", quoted(roles.admin))));
    pg::commit(conn);
  } catch (const DatabaseError& error) {
    pg::rollback_quietly(conn);
    if (error.sqlstate() != "55P03") throw;
    throw DatabaseError(
        fmt::format("create_roles: schema {} unchanged: waited 5 s for a lock on its tables (a "
                    "consumer's or producer's long transaction; see pg_locks). Every inbox insert "
                    "would queue behind a longer wait; run it again when that transaction ends "
                    "({})",
                    schema.name(), error.what()),
        error.sqlstate(), true);
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
  return roles;
}

}  // namespace outbox
