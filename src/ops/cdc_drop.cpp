#include "outbox/cdc_drop.hpp"

#include <fmt/format.h>

#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "pg/params.hpp"

namespace outbox {

namespace {

struct SlotFound {
  bool exists = false;
  bool ours = false;  // pgoutput, this database
  std::string walsender;
  std::int64_t retained = 0;
};

SlotFound find_slot(PGconn* conn, const std::string& slot) {
  const auto row = pg::exec(conn, R"SQL(
SELECT (plugin = 'pgoutput' AND database = current_database())::text,
       coalesce(active_pid::text, ''),
       coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                                     ELSE pg_current_wal_lsn() END, restart_lsn), 0)::bigint
FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)SQL",
                            pg::Params().text(slot).pointers());
  if (row.rows() == 0) return {};
  return {true, row.text(0, 0) == "true", std::string(row.text(0, 1)), row.int64(0, 2)};
}

}  // namespace

CdcDropReport drop_cdc(PGconn* conn, const SchemaName& schema, const std::string& slot,
                       bool force) {
  const std::string shown = detail::printable(slot, 80);
  const SlotFound found = find_slot(conn, slot);
  if (!found.exists) {
    throw InvalidArgument(fmt::format(
        "cdc drop: there is no replication slot {} (outbox status lists the slots)", shown));
  }
  if (!found.ours) {
    throw InvalidArgument(fmt::format(
        "cdc drop: slot {} is not a pgoutput slot of this database; outbox drops only its own",
        shown));
  }
  if (!found.walsender.empty()) {
    throw InvalidArgument(fmt::format(
        "cdc drop: slot {} is streamed right now (walsender {}): stop the relay that streams it "
        "first (and its standbys, or one takes the slot over)",
        shown, found.walsender));
  }
  CdcDropReport report;
  report.retained_bytes = found.retained;
  const std::string registrations = schema.table("outbox_table_less_slots");
  report.was_table_less =
      pg::exec(conn, "SELECT count(*) FROM " + registrations + " WHERE slot_name = $1",
               pg::Params().text(slot).pointers())
          .int64(0, 0) > 0;
  if (report.was_table_less && !force) {
    throw InvalidArgument(fmt::format(
        "cdc drop: slot {} is registered for table-less events, which exist nowhere else until a "
        "relay publishes them: dropping it loses every one not yet published. Let a "
        "`--table-less` relay catch up first (outbox status: 0 MiB not confirmed), then drop it "
        "with --force",
        shown));
  }
  // The slot first, on its own (dropping a slot is not transactional): a slot a relay took
  // meanwhile fails here (55006) and nothing changes. A registration left behind by a failure
  // after it only makes table-less producers refuse, never lose, an event.
  pg::exec(conn, "SELECT pg_drop_replication_slot($1)", pg::Params().text(slot).pointers());
  pg::exec(conn, "BEGIN");
  try {
    if (report.was_table_less) {
      pg::exec(conn, "DELETE FROM " + registrations + " WHERE slot_name = $1",
               pg::Params().text(slot).pointers());
    }
    const auto others = pg::exec(conn,
                                 "SELECT slot_name FROM pg_catalog.pg_replication_slots WHERE "
                                 "plugin = 'pgoutput' AND database = current_database() "
                                 "ORDER BY slot_name");
    for (int row = 0; row < others.rows(); ++row) {
      report.other_slots.emplace_back(others.text(row, 0));
    }
    if (report.other_slots.empty()) {
      // The publications of this schema's outbox tables (the events', the shards', the counters'
      // companion of table-less relays): no slot of this database streams any more.
      const auto publications = pg::exec(conn, R"SQL(
SELECT DISTINCT pubname FROM pg_catalog.pg_publication_tables
WHERE schemaname = $1 AND tablename IN ('outbox_events', 'outbox_aggregate_sequences')
ORDER BY pubname)SQL",
                                         pg::Params().text(schema.name()).pointers());
      for (int row = 0; row < publications.rows(); ++row) {
        const std::string name(publications.text(row, 0));
        pg::exec(conn, "DROP PUBLICATION " + pg::quote_identifier(conn, name));
        report.publications.push_back(name);
      }
    }
    pg::commit(conn);
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
  return report;
}

}  // namespace outbox
