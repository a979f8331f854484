// `outbox quarantine list|retry|skip`: what an operator does with events that stopped retrying.

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/connection.hpp"
#include "outbox/error.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/text.hpp"
#include "quarantine_format.hpp"

namespace outbox::cli {
namespace {

struct QuarantineFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string action;  // list | retry | skip
  std::vector<std::string> event_ids;
  std::string actor;
  std::string reason;
  bool json = false;
};

int run_quarantine(const QuarantineFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = open_cli_connection(flags.db, "outbox-quarantine");
  if (flags.action == "list") {
    const auto events = list_quarantined(connection.get(), schema);
    for (const QuarantinedEvent& e : events) {
      std::cout << (flags.json ? quarantined_json(e) : quarantined_text(e));
    }
    if (!flags.json) std::cout << events.size() << " quarantined event(s)\n";
    return 0;
  }
  // In the order given, each id once: `retry ID ID` is one event, not "1 of 2 released".
  const auto ids = parse_event_ids(flags.event_ids, "outbox quarantine list");
  const std::string actor = actor_or_user(flags.actor);
  if (flags.action == "retry") {
    std::vector<EventId> released;
    retry_quarantined(connection.get(), schema, ids, actor, &released);
    std::cout << released.size() << " of " << ids.size() << " event(s) released for retry\n";
    if (released.size() == ids.size()) return 0;
    std::vector<EventId> left;
    for (const EventId& id : ids) {
      if (std::find(released.begin(), released.end(), id) == released.end()) left.push_back(id);
    }
    // Read after the retry: each was not quarantined when it ran (or was published since,
    // which the line then says).
    for (const std::string& line : not_quarantined(connection.get(), schema, left)) {
      std::cout << "  not released: " << line << "\n";
    }
    return 1;
  }
  skip_quarantined(connection.get(), schema, ids.front(), actor, flags.reason);
  std::cout << "skipped " << ids.front().to_string() << " (recorded in outbox_operator_audit)\n";
  return 0;
}

}  // namespace

void register_quarantine(Commands& commands) {
  const auto [quarantine, flags] = commands.add(
      "quarantine", "events set aside after failing: list, retry, skip", run_quarantine);
  quarantine->require_subcommand(1);
  Commands::add_database_options(quarantine, flags->db, flags->schema);
  auto* list = quarantine->add_subcommand("list", "quarantined events, oldest first");
  list->add_flag("--json", flags->json, "one JSON object per line");
  list->callback([flags] { flags->action = "list"; });
  auto* retry = quarantine->add_subcommand("retry", "make events due again (fix the cause first)");
  retry->add_option("event_ids", flags->event_ids, "event ids")->required();
  retry->add_option("--actor", flags->actor, "who does this (default: $USER)");
  retry->callback([flags] { flags->action = "retry"; });
  auto* skip =
      quarantine->add_subcommand("skip", "finish an event without publishing it (audited)");
  skip->add_option("event_id", flags->event_ids, "event id")->required()->expected(1);
  skip->add_option("--reason", flags->reason, "why it is skipped")->required();
  skip->add_option("--actor", flags->actor, "who does this (default: $USER)");
  skip->callback([flags] { flags->action = "skip"; });
  commands.add_password_file_option(quarantine);
}

}  // namespace outbox::cli
