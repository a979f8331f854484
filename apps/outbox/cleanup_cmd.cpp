// `outbox cleanup`: retention for finished events and inbox ids, once or every interval.

#include <fmt/format.h>

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "outbox/cleanup.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"

namespace outbox::cli {
namespace {

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
    std::cout << nlohmann::json{{"events_deleted", report.events_deleted},
                                {"inbox_deleted", report.inbox_deleted},
                                {"batches", report.batches},
                                {"dry_run", flags.dry_run},
                                {"seconds", seconds}}
                     .dump()
              << std::endl;
    return;
  }
  std::cout << fmt::format(
                   "cleanup: {} {} events finished more than {} ago, {} inbox ids{}, in "
                   "{} batches, {:.2f} s",
                   flags.dry_run ? "would delete" : "deleted", report.events_deleted,
                   flags.retention, report.inbox_deleted,
                   flags.inbox_retention.empty() ? " (inbox kept: no --inbox-retention)"
                                                 : " older than " + flags.inbox_retention,
                   report.batches, seconds)
            << std::endl;
}

}  // namespace

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
  on_termination_signal([&] {
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

}  // namespace outbox::cli
