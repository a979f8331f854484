// `outbox cdc drop --slot NAME`: tears change data capture down when no relay will stream a slot
// again: the slot (refused while a relay streams it, and without --force for a slot registered
// for table-less events), then the schema's publications once no pgoutput slot of the database
// is left (outbox/cdc_drop.hpp). A stopped relay's slot otherwise keeps WAL until the disk fills.

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/cdc_drop.hpp"
#include "outbox/schema.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

struct CdcFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string slot;
  bool force = false;
};

int run_cdc(const CdcFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = open_cli_connection(flags.db, "outbox-cdc");
  const CdcDropReport report = drop_cdc(connection.get(), schema, flags.slot, flags.force);
  std::cout << fmt::format("dropped slot {} (it held {:.1f} MiB of WAL){}\n", printable(flags.slot),
                           static_cast<double>(report.retained_bytes) / (1 << 20),
                           report.was_table_less ? " and its table-less registration" : "");
  if (!report.publications.empty()) {
    std::cout << fmt::format("dropped publication(s) {}: no slot of this database is left\n",
                             printable(fmt::format("{}", fmt::join(report.publications, ", "))));
  } else if (!report.other_slots.empty()) {
    std::cout << fmt::format("kept the publications: slot(s) {} are still there\n",
                             printable(fmt::format("{}", fmt::join(report.other_slots, ", "))));
  }
  return 0;
}

}  // namespace

void register_cdc(Commands& commands) {
  const auto [cdc, flags] =
      commands.add("cdc", "change data capture: drop a slot no relay streams any more", run_cdc);
  cdc->require_subcommand(1);
  Commands::add_database_options(cdc, flags->db, flags->schema);
  auto* drop = cdc->add_subcommand(
      "drop", "drop a slot (and the publications once none is left); refused while streamed");
  drop->add_option("--slot", flags->slot, "the slot, as outbox status lists it")->required();
  drop->add_flag("--force", flags->force,
                 "also a slot registered for table-less events (loses those not yet published)");
  commands.add_password_file_option(cdc);
}

}  // namespace outbox::cli
