// `outbox reconcile list|check|published|retry|skip`: settling events in doubt (sent with no
// answer to a destination that cannot recognise a repeat; outbox/reconcile.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "http_flags.hpp"
#include "outbox/connection.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/http_sink.hpp"
#include "outbox/reconcile.hpp"
#include "outbox/text.hpp"
#include "quarantine_format.hpp"

namespace outbox::cli {
namespace {

struct ReconcileFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string action;  // list | check | published | retry | skip
  std::vector<std::string> event_ids;
  std::string actor;
  std::string reason;
  bool json = false;
  std::string status_url;
  HttpFlags http;  // headers, headers file, CA file, timeout, proxy for `check`
  std::string min_age = "30s";
  bool dry_run = false;
  std::size_t limit = 1000;
};

// Before anything is settled: the status URL must say "did not happen" (404) for an event that
// was never sent. A wrong route answering 404 for everything would send every event again; a
// catch-all answering 200 would mark events published that never were.
void probe_status_url(const HttpStatusCheckOptions& options, const Event& like) {
  Event never = like;
  never.event_id = EventId::generate();
  const HttpStatus probe = ask_http_status(never, options);
  if (probe.answer != HttpStatusAnswer::did_not_happen) {
    throw ConfigError("reconcile check: the status URL answers \"" + probe.detail +
                      "\" for an event that was never sent (" + never.event_id.to_string() +
                      "); it must answer 404 there, so nothing was settled. Check --status-url");
  }
}

// `check`: asks the status URL about each event in doubt; settles those it answers for.
int run_check(PGconn* conn, const SchemaName& schema, const ReconcileFlags& flags) {
  HttpFlags http = flags.http;
  http.url = flags.status_url;
  const HttpSinkOptions parsed = http_sink_options(http, std::chrono::milliseconds(0));
  HttpStatusCheckOptions options{flags.status_url, parsed.headers, parsed.ca_file, parsed.timeout,
                                 parsed.proxy_from_environment};
  const std::string actor = actor_or_user(flags.actor);
  const double min_age = std::chrono::duration<double>(parse_duration(flags.min_age)).count();
  std::size_t settled = 0, left = 0;
  const auto events = list_in_doubt(conn, schema, flags.limit);
  if (!events.empty()) probe_status_url(options, events.front().event);
  for (const InDoubtEvent& in : events) {
    const std::string id = in.event.event_id.to_string();
    if (in.age_seconds < min_age) {
      // Its request may still be running at the endpoint: a 404 now could precede its effect.
      ++left;
      std::cout << id << "  too recent (in doubt for " << fmt::format("{:.1f}", in.age_seconds)
                << " s, --min-age " << flags.min_age << "): asked next time\n";
      continue;
    }
    const HttpStatus status = ask_http_status(in.event, options);
    if (status.answer == HttpStatusAnswer::unknown || flags.dry_run) {
      ++left;
      std::cout << id << "  " << (flags.dry_run ? "would settle as " : "still in doubt: ")
                << (status.answer == HttpStatusAnswer::happened         ? "published: "
                    : status.answer == HttpStatusAnswer::did_not_happen ? "retry: "
                                                                        : "")
                << status.detail << "\n";
      continue;
    }
    const Settlement settlement =
        status.answer == HttpStatusAnswer::happened ? Settlement::published : Settlement::retry;
    const std::vector<EventId> one{in.event.event_id};
    const auto done = settle_in_doubt(conn, schema, one, settlement, actor,
                                      "status URL answered " + status.detail);
    settled += done.size();
    std::cout << id << "  " << (done.empty() ? "already settled" : to_string(settlement)) << ": "
              << status.detail << "\n";
  }
  std::cout << settled << " of " << events.size() << " event(s) in doubt settled";
  if (left > 0)
    std::cout << "; " << left
              << " still in doubt (decide with `outbox reconcile "
                 "published|retry|skip ID --reason ...`)";
  std::cout << "\n";
  return left == 0 ? 0 : 1;
}

int run_reconcile(const ReconcileFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = open_cli_connection(flags.db, "outbox-reconcile");
  if (flags.action == "list") {
    const auto events = list_in_doubt(connection.get(), schema, flags.limit);
    for (const InDoubtEvent& e : events) {
      std::cout << (flags.json ? in_doubt_json(e) : in_doubt_text(e));
    }
    if (!flags.json) std::cout << events.size() << " event(s) in doubt\n";
    return 0;
  }
  if (flags.action == "check") return run_check(connection.get(), schema, flags);
  const auto ids = parse_event_ids(flags.event_ids, "outbox reconcile list");
  const Settlement settlement = flags.action == "published" ? Settlement::published
                                : flags.action == "retry"   ? Settlement::retry
                                                            : Settlement::skip;
  const auto settled = settle_in_doubt(connection.get(), schema, ids, settlement,
                                       actor_or_user(flags.actor), flags.reason);
  std::cout << settled.size() << " of " << ids.size() << " event(s) settled as "
            << to_string(settlement) << " (recorded in outbox_operator_audit)\n";
  if (settled.size() == ids.size()) return 0;
  std::vector<EventId> left;
  for (const EventId& id : ids) {
    if (std::find(settled.begin(), settled.end(), id) == settled.end()) left.push_back(id);
  }
  for (const std::string& line : not_in_doubt(connection.get(), schema, left)) {
    std::cout << "  not settled: " << line << "\n";
  }
  return 1;
}

void add_decision(CLI::App* reconcile, const std::shared_ptr<ReconcileFlags>& flags,
                  const char* name, const char* help) {
  auto* decide = reconcile->add_subcommand(name, help);
  decide->add_option("event_ids", flags->event_ids, "event ids")->required();
  decide->add_option("--reason", flags->reason, "on what ground (recorded)")->required();
  decide->add_option("--actor", flags->actor, "who decides (default: $USER)");
  decide->callback([flags, name] { flags->action = name; });
}

}  // namespace

void register_reconcile(Commands& commands) {
  const auto [reconcile, flags] = commands.add(
      "reconcile",
      "events in doubt (no answer from a destination without idempotency): list, check, settle",
      run_reconcile);
  reconcile->require_subcommand(1);
  Commands::add_database_options(reconcile, flags->db, flags->schema);
  auto* list = reconcile->add_subcommand("list", "events in doubt, oldest first");
  list->add_flag("--json", flags->json, "one JSON object per line");
  list->callback([flags] { flags->action = "list"; });
  auto* check = reconcile->add_subcommand(
      "check",
      "ask the destination: GET --status-url per event; 200 settles it as published, 404 sends "
      "it again, anything else leaves it in doubt (exit 1). First asks about an event never "
      "sent, which must answer 404");
  check
      ->add_option("--status-url", flags->status_url,
                   "e.g. https://api.example.com/charges/{event_id} (placeholders as --http-url)")
      ->required();
  check->add_option("--actor", flags->actor, "recorded as who settled (default: $USER)");
  check
      ->add_option("--min-age", flags->min_age,
                   "leave events in doubt for less than this (their request may still be running "
                   "at the endpoint): more than the relays' --http-timeout")
      ->capture_default_str();
  check->add_flag("--dry-run", flags->dry_run, "ask and say, settle nothing");
  add_http_request_options(check, flags->http);
  check->callback([flags] { flags->action = "check"; });
  add_decision(reconcile, flags, "published", "it happened at the destination: mark published");
  add_decision(reconcile, flags, "retry", "it did not happen: send it again");
  add_decision(reconcile, flags, "skip", "it is not to happen: finish it unpublished");
  commands.add_password_file_option(reconcile);
}

}  // namespace outbox::cli
