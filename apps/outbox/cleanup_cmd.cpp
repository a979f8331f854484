// `outbox cleanup`: retention for finished events and inbox ids, once or every interval.

#include <fmt/format.h>

#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/cleanup.hpp"
#include "outbox/connection.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

const CleanupOptions kCleanupDefaults{};

struct CleanupFlags {
  std::string db;
  std::string schema = kCleanupDefaults.schema.name();
  std::string retention = duration_text(kCleanupDefaults.retention);
  std::string inbox_retention;                                          // empty: keep inbox ids
  bool allow_short_retention = kCleanupDefaults.allow_short_retention;  // tests only: below 1h
  std::size_t batch_size = kCleanupDefaults.batch_size;
  std::string pause = duration_text(kCleanupDefaults.pause);
  std::string every;  // empty: once
  bool dry_run = kCleanupDefaults.dry_run;
  bool json = false;
};

CleanupOptions to_options(const CleanupFlags& flags) {
  CleanupOptions options;
  options.schema = SchemaName(flags.schema);
  options.retention = parse_duration(flags.retention);
  if (!flags.inbox_retention.empty())
    options.inbox_retention = parse_duration(flags.inbox_retention);
  options.batch_size = flags.batch_size;
  options.pause = parse_duration(flags.pause);
  options.dry_run = flags.dry_run;
  options.allow_short_retention = flags.allow_short_retention;
  check_cleanup_options(options);
  return options;
}

void print(const CleanupFlags& flags, const CleanupReport& report, double seconds) {
  if (flags.json) {
    nlohmann::json behind = nlohmann::json::array();
    for (const ConsumerBehind& c : report.consumers_behind) {
      behind.push_back({{"consumer", c.consumer}, {"last_applied_at", c.last_applied_at}});
    }
    std::cout << nlohmann::json{{"events_deleted", report.events_deleted},
                                {"inbox_deleted", report.inbox_deleted},
                                {"batches", report.batches},
                                {"dry_run", flags.dry_run},
                                {"seconds", seconds},
                                {"consumers_behind", std::move(behind)}}
                     .dump()
              << std::endl;
    return;
  }
  for (const ConsumerBehind& c : report.consumers_behind) {
    std::cout << fmt::format(
                     "cleanup: warning: inbox consumer {} has applied nothing since {}, before "
                     "the cutoff; if it is behind rather than idle or retired, the events it "
                     "misses are being deleted: replay them now (docs/OPERATIONS.md, "
                     "OutboxConsumerOffsetGap)",
                     outbox::printable(c.consumer), c.last_applied_at)
              << std::endl;
  }
  const std::string inbox = flags.inbox_retention.empty() ? " (inbox kept: no --inbox-retention)"
                                                          : " older than " + flags.inbox_retention;
  if (report.events_deleted == 0 && report.inbox_deleted == 0) {
    std::cout << fmt::format(
                     "cleanup: nothing to delete: no event finished more than {} ago, no inbox "
                     "id{} ({:.2f} s)",
                     flags.retention, inbox, seconds)
              << std::endl;
    return;
  }
  std::cout << fmt::format(
                   "cleanup: {} {} event(s) finished more than {} ago, {} inbox id(s){}, "
                   "in {} batch(es), {:.2f} s",
                   flags.dry_run ? "would delete" : "deleted", report.events_deleted,
                   flags.retention, report.inbox_deleted, inbox, report.batches, seconds)
            << std::endl;
}

int run_cleanup(const CleanupFlags& flags) {
  const CleanupOptions options = to_options(flags);  // bad flags fail before connecting
  const auto every =
      flags.every.empty() ? std::chrono::milliseconds(0) : parse_duration(flags.every);
  if (!flags.every.empty() && every < std::chrono::seconds(1)) {
    throw InvalidArgument("--every must be at least 1s");
  }
  if (every.count() == 0) {
    auto connection = open_cli_connection(flags.db, "outbox-cleanup");
    const auto started = std::chrono::steady_clock::now();
    const CleanupReport report = cleanup(connection.get(), options);
    print(flags, report,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    return 0;
  }
  // Periodic: a failed round (database down) is reported and the next round tries again.
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  const SignalWatch watch = on_termination_signal([&] {
    std::lock_guard lock(mutex);
    stopping = true;
    wake.notify_all();
  });
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    try {
      auto connection = open_cli_connection(flags.db, "outbox-cleanup");
      const CleanupReport report = cleanup(connection.get(), options);
      print(flags, report,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    } catch (const DatabaseError& e) {
      // Retryable includes a batch whose COMMIT answer was lost: it is looked at again.
      if (!e.retryable()) throw;
      std::cerr << "outbox cleanup: " << e.what() << "; next round in " << flags.every << "\n";
    }
    std::unique_lock lock(mutex);
    if (wake.wait_until(lock, started + every, [&] { return stopping; })) return 0;
  }
}

}  // namespace

void register_cleanup(Commands& commands) {
  const auto [cleanup, flags] = commands.add(
      "cleanup", "delete events finished before the retention, and old inbox ids, in batches",
      run_cleanup);
  Commands::add_database_options(cleanup, flags->db, flags->schema);
  cleanup
      ->add_option("--retention", flags->retention,
                   "keep published and skipped events this long (the replay horizon)")
      ->capture_default_str();
  cleanup->add_option("--inbox-retention", flags->inbox_retention,
                      "delete inbox ids older than this (at least --retention; default: keep)");
  cleanup->add_option("--batch-size", flags->batch_size, "rows examined per transaction")
      ->check(CLI::Range(1, 1000000));
  cleanup->add_option("--pause", flags->pause, "pause between batches, e.g. 50ms");
  cleanup->add_option("--every", flags->every,
                      "repeat at this interval until stopped (default: once)");
  cleanup->add_flag("--dry-run", flags->dry_run, "count what would be deleted");
  cleanup->add_flag("--allow-short-retention", flags->allow_short_retention,
                    "accept a retention below 1h (tests only: events published moments ago go)");
  cleanup->add_flag("--json", flags->json, "print the report as JSON");
  commands.add_password_file_option(cleanup);
}

}  // namespace outbox::cli
