// `outbox status`: how many events wait, are in flight, retry, sit in quarantine, went out; and
// the replication slots of change-data-capture relays, with the WAL they hold back.

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "command.hpp"
#include "common/printable.hpp"
#include "outbox/schema.hpp"
#include "pg/connection.hpp"

namespace outbox::cli {
namespace {

struct StatusFlags {
  std::string db;
  std::string schema = SchemaName().name();
};

std::string mebibytes(const std::string& bytes) {
  return fmt::format("{:.1f} MiB", std::stod(bytes) / (1 << 20));
}

// The logical slots change-data-capture relays stream from (pgoutput, this database), with the
// WAL each holds back: what `--wal-budget` and max_slot_wal_keep_size bound.
void print_slots(PGconn* conn, const SchemaName& schema) {
  const auto slots = pg::exec(
      conn,
      "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
      "ELSE pg_current_wal_lsn() END AS lsn) "
      "SELECT slot_name, coalesce(active_pid::text, ''), coalesce(wal_status, ''), "
      "coalesce(pg_wal_lsn_diff(here.lsn, restart_lsn)::bigint::text, ''), "
      "coalesce(pg_wal_lsn_diff(here.lsn, confirmed_flush_lsn)::bigint::text, ''), "
      "(slot_name::text IN (SELECT slot_name FROM " +
          schema.table("outbox_table_less_slots") +
          "))::text "
          "FROM pg_replication_slots, here WHERE slot_type = 'logical' AND plugin = 'pgoutput' "
          "AND database = current_database() ORDER BY slot_name");
  for (int row = 0; row < slots.rows(); ++row) {
    const std::string walsender(slots.text(row, 1));
    const std::string retained(slots.text(row, 3));
    const std::string unconfirmed(slots.text(row, 4));
    std::cout << "slot " << detail::printable(slots.text(row, 0)) << ": "
              << (walsender.empty() ? std::string("not streamed")
                                    : "streamed (walsender " + walsender + ")")
              << ", wal_status " << slots.text(row, 2);
    if (!retained.empty()) {
      std::cout << ", holds " << mebibytes(retained) << " of WAL, "
                << mebibytes(unconfirmed.empty() ? "0" : unconfirmed) << " not confirmed";
    } else {
      std::cout << " (its WAL is gone: a relay replaces it and publishes from the table)";
    }
    if (slots.text(row, 5) == "true") {
      std::cout << "; registered for table-less events: the only copy of those not yet published";
    }
    std::cout << "\n";
  }
}

int run_status(const StatusFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = open_cli_connection(flags.db, "outbox-status");
  const std::string events = schema.table("outbox_events");
  const auto result = pg::exec(
      connection.get(),
      "WITH pending AS (SELECT * FROM " + events +
          " WHERE published_at IS NULL AND skipped_at IS NULL)"
          " SELECT (SELECT count(*) FROM pending),"
          "        (SELECT count(*) FROM pending WHERE claim_until > now()),"
          "        (SELECT count(*) FROM pending WHERE attempt_count > 0 AND quarantined_at IS "
          "NULL),"
          "        (SELECT count(*) FROM pending WHERE quarantined_at IS NOT NULL),"
          "        (SELECT count(*) FROM " +
          events +
          "         WHERE published_at IS NOT NULL),"
          "        (SELECT count(*) FROM " +
          events +
          "         WHERE skipped_at IS NOT NULL),"
          "        (SELECT coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8"
          "         FROM pending)");
  std::cout << "pending " << result.text(0, 0) << " (in flight " << result.text(0, 1)
            << ", retrying " << result.text(0, 2) << ", quarantined " << result.text(0, 3)
            << "), published " << result.text(0, 4) << ", skipped " << result.text(0, 5)
            << ", oldest pending " << result.text(0, 6) << " s\n";
  print_slots(connection.get(), schema);
  return 0;
}

}  // namespace

void register_status(Commands& commands) {
  const auto [status, flags] =
      commands.add("status", "pending, in-flight and published counts", run_status);
  Commands::add_database_options(status, flags->db, flags->schema);
  commands.add_password_file_option(status);
}

}  // namespace outbox::cli
