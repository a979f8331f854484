#include "outbox/cdc_drop.hpp"

#include <fmt/format.h>

#include "cdc/slot_admin.hpp"
#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "pg/params.hpp"

namespace outbox {

namespace {

// The schemas whose outbox_table_less_slots registers `slot` (any schema of this database: a
// registration in another schema than --schema holds that schema's table-less events).
std::vector<std::string> registered_in(PGconn* conn, const std::string& slot) {
  const auto tables = pg::exec(conn, R"SQL(
SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'outbox_table_less_slots' AND c.relkind = 'r' ORDER BY n.nspname)SQL");
  std::vector<std::string> schemas;
  for (int row = 0; row < tables.rows(); ++row) {
    const std::string schema(tables.text(row, 0));
    const std::string table = pg::quote_identifier(conn, schema) + "." +
                              pg::quote_identifier(conn, "outbox_table_less_slots");
    if (pg::exec(conn, "SELECT count(*) FROM " + table + " WHERE slot_name = $1",
                 pg::Params().text(slot).pointers())
            .int64(0, 0) > 0) {
      schemas.push_back(schema);
    }
  }
  return schemas;
}

// Whether this schema's relays are known to use `slot`: a relay session's row names it, or it
// has the name relays give by default (--slot outbox, and its shards outbox_<i>_of_<n>).
bool known_to_schema(PGconn* conn, const SchemaName& schema, const std::string& slot) {
  return pg::exec(conn,
                  "SELECT (EXISTS (SELECT 1 FROM " + schema.table("outbox_relays") +
                      " WHERE slot_name = $1) OR $1 ~ '^outbox(_[0-9]+_of_[0-9]+)?$')::text",
                  pg::Params().text(slot).pointers())
             .text(0, 0) == "true";
}

void check_droppable(PGconn* conn, const SchemaName& schema, const std::string& slot,
                     const cdc::ServerSlot& found, bool force, CdcDropReport& report) {
  const std::string shown = detail::printable(slot, 80);
  if (!found.ours) {
    throw InvalidArgument(fmt::format(
        "cdc drop: slot {} is not a pgoutput slot of this database; not one of outbox's", shown));
  }
  if (found.walsender != 0) {
    throw InvalidArgument(fmt::format(
        "cdc drop: slot {} is streamed right now (walsender {}): stop the relay that streams it "
        "first (and its standbys, or one takes the slot over)",
        shown, found.walsender));
  }
  const std::vector<std::string> registrations = registered_in(conn, slot);
  for (const std::string& other : registrations) {
    if (other != schema.name()) {
      throw InvalidArgument(fmt::format(
          "cdc drop: slot {} is registered for the table-less events of schema {}, not {}: drop "
          "it with --schema {} (and --force, once its relay has caught up)",
          shown, detail::printable(other), schema.name(), detail::printable(other)));
    }
  }
  report.was_table_less = !registrations.empty();
  if (report.was_table_less && !force) {
    throw InvalidArgument(fmt::format(
        "cdc drop: slot {} is registered for table-less events, which exist nowhere else until a "
        "relay publishes them: dropping it loses every one not yet published. Let a "
        "`--table-less` relay catch up first (outbox status: 0 MiB not confirmed), then drop it "
        "with --force",
        shown));
  }
  if (!report.was_table_less && !force && !known_to_schema(conn, schema, slot)) {
    throw InvalidArgument(fmt::format(
        "cdc drop: no relay of schema {} is known to use slot {} (no relay row names it and it "
        "has no default name): another tool's slot (Debezium, a logical replica) would lose its "
        "position. If a relay of this schema ran with --slot {}, drop it with --force",
        schema.name(), shown, shown));
  }
}

// The publications of `schema`'s outbox tables and nothing else (not FOR ALL TABLES, not FOR
// TABLES IN SCHEMA, no other table): the events', the shards', the counters' companion.
std::vector<std::string> own_publications(PGconn* conn, const SchemaName& schema) {
  const auto rows = pg::exec(conn, R"SQL(
SELECT p.pubname FROM pg_catalog.pg_publication p
WHERE NOT p.puballtables
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace n WHERE n.pnpubid = p.oid)
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables t WHERE t.pubname = p.pubname
              AND t.schemaname = $1
              AND t.tablename IN ('outbox_events', 'outbox_aggregate_sequences'))
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables t WHERE t.pubname = p.pubname
                  AND NOT (t.schemaname = $1
                           AND t.tablename IN ('outbox_events', 'outbox_aggregate_sequences')))
ORDER BY p.pubname)SQL",
                             pg::Params().text(schema.name()).pointers());
  std::vector<std::string> names;
  for (int row = 0; row < rows.rows(); ++row) names.emplace_back(rows.text(row, 0));
  return names;
}

}  // namespace

CdcDropReport drop_cdc(PGconn* conn, const SchemaName& schema, const std::string& slot,
                       bool force) {
  const std::optional<cdc::ServerSlot> found = cdc::find_slot(conn, slot);
  if (!found) {
    throw InvalidArgument(
        fmt::format("cdc drop: there is no replication slot {} (outbox status lists the slots)",
                    detail::printable(slot, 80)));
  }
  CdcDropReport report;
  report.retained_bytes = found->retained_bytes.value_or(0);
  check_droppable(conn, schema, slot, *found, force, report);
  // One transaction, the slot last: dropping a slot is not undone by a rollback, so everything
  // that could fail comes before it. A relay that took the slot since the checks makes the drop
  // fail (55006) and nothing changes.
  pg::exec(conn, "BEGIN");
  try {
    const auto others = pg::exec(conn,
                                 "SELECT slot_name FROM pg_catalog.pg_replication_slots WHERE "
                                 "plugin = 'pgoutput' AND database = current_database() "
                                 "AND slot_name <> $1 ORDER BY slot_name",
                                 pg::Params().text(slot).pointers());
    for (int row = 0; row < others.rows(); ++row) {
      report.other_slots.emplace_back(others.text(row, 0));
    }
    if (report.was_table_less) {
      pg::exec(conn,
               "DELETE FROM " + schema.table("outbox_table_less_slots") + " WHERE slot_name = $1",
               pg::Params().text(slot).pointers());
    }
    if (report.other_slots.empty()) {
      for (const std::string& name : own_publications(conn, schema)) {
        pg::exec(conn, "DROP PUBLICATION " + pg::quote_identifier(conn, name));
        report.publications.push_back(name);
      }
    }
    pg::exec(conn, "SELECT pg_drop_replication_slot($1)", pg::Params().text(slot).pointers());
    pg::commit(conn);
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
  return report;
}

}  // namespace outbox
