// `outbox migrate`: creates or upgrades outbox's tables, and with --create-roles the roles each
// part needs.

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/connection.hpp"
#include "outbox/roles.hpp"
#include "outbox/schema.hpp"

namespace outbox::cli {
namespace {

struct MigrateFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::int64_t lock_timeout_ms = kMigrateLockTimeout.count();
  bool create_roles = false;
};

int run_migrate(const MigrateFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = Connection::open(database_url(flags.db), "outbox-migrate");
  const auto report =
      migrate(connection.get(), schema, std::chrono::milliseconds(flags.lock_timeout_ms));
  std::cout << "schema " << schema.name() << ": version " << report.from_version << " -> "
            << report.to_version << " (" << report.applied << " migration(s) applied)\n";
  if (flags.create_roles) {
    const RoleNames roles = create_roles(connection.get(), schema);
    std::cout << fmt::format(
        "roles {}, {}, {}, {}: privileges set (GRANT them to your login roles)\n", roles.writer,
        roles.relay, roles.inbox, roles.admin);
  }
  return 0;
}

}  // namespace

void register_migrate(Commands& commands) {
  const auto [migrate, flags] =
      commands.add("migrate", "create or upgrade outbox's tables", run_migrate);
  migrate->add_option("--db", flags->db,
                      "libpq connection string or URI (default: $OUTBOX_DATABASE_URL, PG*)");
  migrate->add_option("--schema", flags->schema, "schema for outbox's tables");
  migrate
      ->add_option("--lock-timeout-ms", flags->lock_timeout_ms,
                   "longest wait for a lock on outbox's tables (0: no limit); writers queue "
                   "behind a waiting migration")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3'600'000}));
  migrate->add_flag("--create-roles", flags->create_roles,
                    "also create the roles <schema>_writer, _relay, _inbox, _admin with exactly "
                    "the privileges each part needs (again after every upgrade)");
  commands.add_password_file_option(migrate);
}

}  // namespace outbox::cli
