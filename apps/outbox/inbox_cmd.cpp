// `outbox inbox list|release|skip`: what an operator does with the events a gap-aware consumer
// holds (outbox/inbox_admin.hpp): waiting for a predecessor, or parked after failing.

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/connection.hpp"
#include "outbox/error.hpp"
#include "outbox/inbox_admin.hpp"
#include "outbox/text.hpp"
#include "quarantine_format.hpp"

namespace outbox::cli {
namespace {

struct InboxFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string action;  // list | release | skip
  std::string consumer;
  std::vector<std::string> event_ids;
  std::string actor;
  std::string reason;
  bool json = false;
};

std::string held_text(const HeldEvent& e) {
  using outbox::printable;
  const std::string state =
      e.kind == "waiting" ? (e.parked ? "parked (waiting)" : "waiting") : "parked (" + e.kind + ")";
  const std::string decision =
      e.decision.empty() ? ""
                         : fmt::format("; {} by {} pending", e.decision, printable(e.decided_by));
  return fmt::format("{}  {}  {} {} #{} {} v{}  {} since {}{}\n    {}\n", e.event_id.to_string(),
                     printable(e.consumer_name), printable(e.aggregate_type),
                     printable(e.aggregate_id), e.aggregate_sequence, printable(e.event_type),
                     e.schema_version, state, e.held_at, decision, printable(e.reason));
}

std::string held_json(const HeldEvent& e) {
  const nlohmann::json object = {{"consumer", e.consumer_name},
                                 {"event_id", e.event_id.to_string()},
                                 {"aggregate_type", e.aggregate_type},
                                 {"aggregate_id", e.aggregate_id},
                                 {"aggregate_sequence", e.aggregate_sequence},
                                 {"event_type", e.event_type},
                                 {"schema_version", e.schema_version},
                                 {"kind", e.kind},
                                 {"parked", e.parked},
                                 {"reason", e.reason},
                                 {"held_at", e.held_at},
                                 {"decision", e.decision},
                                 {"decided_by", e.decided_by}};
  return object.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace) +
         "\n";
}

int run_inbox(const InboxFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = open_cli_connection(flags.db, "outbox-inbox");
  if (flags.action == "list") {
    const auto held = list_held(connection.get(), schema, flags.consumer);
    std::size_t parked = 0;
    for (const HeldEvent& e : held) {
      std::cout << (flags.json ? held_json(e) : held_text(e));
      parked += e.parked ? 1 : 0;
    }
    if (!flags.json) std::cout << held.size() << " held event(s), " << parked << " parked\n";
    return 0;
  }
  const auto ids = parse_event_ids(flags.event_ids, "outbox inbox list");
  const bool release = flags.action == "release";
  decide_held(connection.get(), schema, flags.consumer, ids.front(),
              release ? HeldDecision::release : HeldDecision::skip, actor_or_user(flags.actor),
              flags.reason);
  std::cout << fmt::format("{} {} at consumer '{}': recorded (outbox_operator_audit)",
                           release ? "released" : "skipped", ids.front().to_string(),
                           outbox::printable(flags.consumer));
  // A decision waits behind an earlier parked event of its aggregate that has none.
  const auto held = list_held(connection.get(), schema, flags.consumer);
  const auto decided = std::find_if(held.begin(), held.end(),
                                    [&](const HeldEvent& e) { return e.event_id == ids.front(); });
  const HeldEvent* blocker = nullptr;
  for (const HeldEvent& e : held) {
    if (decided != held.end() && e.aggregate_type == decided->aggregate_type &&
        e.aggregate_id == decided->aggregate_id &&
        e.aggregate_sequence < decided->aggregate_sequence && e.kind != "waiting" &&
        e.decision.empty() &&
        (blocker == nullptr || e.aggregate_sequence < blocker->aggregate_sequence)) {
      blocker = &e;
    }
  }
  if (blocker != nullptr) {
    std::cout << fmt::format(
        "; it waits behind parked event {} (sequence {}) of its aggregate: decide that one "
        "first\n",
        blocker->event_id.to_string(), blocker->aggregate_sequence);
    return 0;
  }
  std::cout << "; the consumer carries it out within seconds while it runs\n";
  return 0;
}

}  // namespace

void register_inbox(Commands& commands) {
  const auto [inbox, flags] = commands.add(
      "inbox", "events a gap-aware consumer holds back: list, release, skip", run_inbox);
  inbox->require_subcommand(1);
  Commands::add_database_options(inbox, flags->db, flags->schema);
  auto* list = inbox->add_subcommand("list", "held events, parked first, then oldest first");
  list->add_option("--consumer", flags->consumer, "only this consumer's (its inbox name)");
  list->add_flag("--json", flags->json, "one JSON object per line");
  list->callback([flags] { flags->action = "list"; });
  auto* release = inbox->add_subcommand(
      "release", "apply a held event now, accepting any gap before it (a failed one: try again)");
  auto* skip = inbox->add_subcommand(
      "skip", "go on as if the event was applied, without its effect (audited)");
  for (auto* sub : {release, skip}) {
    sub->add_option("event_id", flags->event_ids, "event id")->required()->expected(1);
    sub->add_option("--consumer", flags->consumer, "the consumer that holds it (its inbox name)")
        ->required();
    sub->add_option("--actor", flags->actor, "who does this (default: $USER)");
  }
  release->add_option("--reason", flags->reason, "why (recorded in the audit)");
  skip->add_option("--reason", flags->reason, "why it is skipped")->required();
  release->callback([flags] { flags->action = "release"; });
  skip->callback([flags] { flags->action = "skip"; });
  commands.add_password_file_option(inbox);
}

}  // namespace outbox::cli
