#include "outbox/roles.hpp"

#include <fmt/format.h>

#include "pg/connection.hpp"

namespace outbox {
namespace {

// Each role's privileges. Column lists where a role needs a column, not the row: a writer learns
// its event's id and sequence (RETURNING) and resolve_commit finds an id, but never reads
// payloads. The notify trigger runs with the writer's rights, so writers read outbox_relays.
constexpr const char* kGrants = R"SQL(
REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {writer}, {relay}, {inbox}, {admin};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {writer}, {relay}, {inbox}, {admin};
GRANT USAGE ON SCHEMA {s} TO {writer}, {relay}, {inbox}, {admin};

GRANT INSERT ON {s}.outbox_events TO {writer};
GRANT SELECT (event_id, aggregate_sequence) ON {s}.outbox_events TO {writer};
GRANT SELECT, INSERT, UPDATE ON {s}.outbox_aggregate_sequences TO {writer};
GRANT SELECT ON {s}.outbox_relays, {s}.outbox_cleanup_horizon, {s}.outbox_table_less_slots
  TO {writer};

-- INSERT: a table-less event the stream cannot publish at once is written to the table.
GRANT SELECT, INSERT, UPDATE ON {s}.outbox_events TO {relay};
GRANT SELECT, INSERT, UPDATE ON {s}.outbox_table_less_slots TO {relay};
GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.outbox_relays TO {relay};
GRANT SELECT ON {s}.outbox_schema_migrations TO {relay};

GRANT SELECT, INSERT ON {s}.processed_events TO {inbox};

GRANT SELECT, UPDATE, DELETE ON {s}.outbox_events TO {admin};
GRANT SELECT, INSERT ON {s}.outbox_operator_audit TO {admin};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {admin};
GRANT SELECT, DELETE ON {s}.processed_events TO {admin};
GRANT SELECT, INSERT, UPDATE ON {s}.outbox_cleanup_horizon TO {admin};
GRANT SELECT ON {s}.outbox_relays, {s}.outbox_aggregate_sequences,
  {s}.outbox_schema_migrations TO {admin};
GRANT SELECT, DELETE ON {s}.outbox_table_less_slots TO {admin};
)SQL";

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
    pg::exec(conn, fmt::format(kGrants, fmt::arg("s", schema.quoted()),
                               fmt::arg("writer", quoted(roles.writer)),
                               fmt::arg("relay", quoted(roles.relay)),
                               fmt::arg("inbox", quoted(roles.inbox)),
                               fmt::arg("admin", quoted(roles.admin))));
    pg::commit(conn);
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
  return roles;
}

}  // namespace outbox
