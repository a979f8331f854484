// `outbox replay`: publish again events that were published, inside the retention, same ids and
// per-aggregate order (outbox/replay.hpp), audited; a dry run says what it would take. Then waits
// for the relays to publish them again, with a progress bar.

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/connection.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/replay.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

struct ReplayFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string since;
  std::string until;
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_id;
  bool dry_run = false;
  std::string actor;
  std::string reason;
  std::string wait = "10m";  // 0: do not wait for the relays
};

// One line that redraws itself on a terminal; elsewhere a line per tenth.
class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)), tty_(::isatty(2) == 1) {}
  void show(std::size_t done, std::size_t total) {
    const std::size_t tenth = total == 0 ? 10 : done * 10 / total;
    if (!tty_ && tenth == last_tenth_ && done != total) return;
    last_tenth_ = tenth;
    constexpr std::size_t kWidth = 30;
    const std::size_t filled = total == 0 ? kWidth : done * kWidth / total;
    std::cerr << (tty_ ? "\r" : "") << what_ << " [" << std::string(filled, '#')
              << std::string(kWidth - filled, ' ') << "] " << done << "/" << total
              << (tty_ ? "" : "\n") << std::flush;
  }
  void finish() {
    if (tty_) std::cerr << "\n";
  }

 private:
  std::string what_;
  bool tty_;
  std::size_t last_tenth_ = 11;
};

int run_replay(const ReplayFlags& flags) {
  const SchemaName schema(flags.schema);
  ReplayFilter filter;
  filter.since = timestamp_flag(flags.since);
  filter.until = timestamp_flag(flags.until);
  if (!flags.aggregate_type.empty()) filter.aggregate_type = flags.aggregate_type;
  if (!flags.aggregate_id.empty()) filter.aggregate_id = flags.aggregate_id;
  if (!flags.event_id.empty()) {
    filter.event_id = EventId::parse(flags.event_id);
    if (!filter.event_id) {
      throw InvalidArgument("replay: --event-id \"" + outbox::printable(flags.event_id, 80) +
                            "\" is not a UUID");
    }
  }
  const auto wait = parse_duration(flags.wait);
  auto connection = open_cli_connection(flags.db, "outbox-replay");
  const ReplayPlan plan = plan_replay(connection.get(), schema, filter);
  std::cout << fmt::format("replay: {} published event(s) of {} aggregate(s)", plan.events,
                           plan.aggregates);
  if (plan.events > 0) {
    std::cout << ", occurred " << plan.first_occurred_at << " .. " << plan.last_occurred_at;
  }
  std::cout << std::endl;
  if (plan.events == 0) {
    // As `audit` with nothing to audit: a filter that matches nothing (a misspelt aggregate, a
    // window outside the retention) must not read as done.
    std::cerr << "replay: nothing matched: no published event of the window and filters is "
                 "still in the table (outside the retention, or a filter that matches nothing)"
              << std::endl;
    return 4;
  }
  if (flags.dry_run) {
    if (flags.dry_run) std::cout << "replay: dry run, nothing changed" << std::endl;
    return 0;
  }
  if (flags.reason.empty()) {
    throw InvalidArgument("replay: say why with --reason TEXT; it goes into the audit record");
  }
  const std::string actor = actor_or_user(flags.actor);
  Progress pending("replay: made pending");
  const ReplayResult result =
      replay_published(connection.get(), schema, filter, actor, flags.reason,
                       [&](std::size_t done, std::size_t total) { pending.show(done, total); });
  pending.finish();
  const std::vector<EventId>& replayed = result.replayed;
  if (result.busy_aggregates > 0) {
    std::cerr << "replay: " << result.busy_aggregates
              << " aggregate(s) left alone: a relay had one of their events in flight; run the "
                 "same replay again in a moment"
              << std::endl;
  }
  std::cout << "replay: " << replayed.size()
            << " event(s) pending again (audited as 'replay'); relays publish them in order"
            << std::endl;
  if (wait.count() == 0 || replayed.empty()) return 0;
  Progress published("replay: published again");
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::size_t count = 0;
  while (true) {
    count = count_published(connection.get(), schema, replayed);
    published.show(count, replayed.size());
    if (count == replayed.size() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  published.finish();
  if (count < replayed.size()) {
    std::cerr << "replay: " << replayed.size() - count << " event(s) not published again within "
              << flags.wait
              << "; they stay pending for the relays (is one running? `outbox status`)"
              << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

void register_replay(Commands& commands) {
  auto [replay, flags] = commands.add<ReplayFlags>(
      "replay", "publish again events that were published (same ids, per-aggregate order), audited",
      &run_replay);
  Commands::add_database_options(replay, flags->db, flags->schema);
  replay
      ->add_option("--since", flags->since,
                   "first occurred_at to replay: a timestamp (2026-12-01T18:00:00Z) or a "
                   "duration ago (2h)")
      ->required();
  replay->add_option("--until", flags->until, "replay what occurred before this (default: now)");
  replay->add_option("--aggregate-type", flags->aggregate_type, "only this aggregate type");
  replay->add_option("--aggregate-id", flags->aggregate_id, "only this aggregate id");
  replay->add_option("--event-id", flags->event_id, "only this event");
  replay->add_flag("--dry-run", flags->dry_run, "say what would be replayed; change nothing");
  replay->add_option("--reason", flags->reason, "why, for the audit record (required)");
  replay->add_option("--actor", flags->actor, "who does this (default: $USER)");
  replay
      ->add_option("--wait", flags->wait,
                   "how long to wait for the relays to publish them again (0: do not wait)")
      ->capture_default_str();
  commands.add_password_file_option(replay);
}

}  // namespace outbox::cli
