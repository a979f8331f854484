// `outbox status`: how many events wait, are in flight, retry, sit in quarantine, went out.

#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "command.hpp"
#include "outbox/schema.hpp"
#include "pg/connection.hpp"

namespace outbox::cli {
namespace {

struct StatusFlags {
  std::string db;
  std::string schema = SchemaName().name();
};

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
