// `outbox status`: how many events wait, are in flight, retry, sit in quarantine, went out; the
// replication slots of change-data-capture relays, with the WAL they hold back; and the relay
// sessions. As text or one JSON object (--json), once or at an interval (--watch).

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/schema.hpp"
#include "outbox/status.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

struct StatusFlags {
  std::string db;
  std::string schema = SchemaName().name();
  bool json = false;
  std::string watch;  // empty: once
};

std::string mebibytes(std::int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// An age for a person: "3.1 s" under a minute, then "4m5s", "2h0m" (whole seconds).
std::string age_text(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  return format_duration(std::chrono::seconds(static_cast<std::int64_t>(seconds)));
}

void print_text(const OutboxStatus& s) {
  std::cout << "pending " << s.pending << " (in flight " << s.in_flight << ", retrying "
            << s.retrying << "), quarantined " << s.quarantined << ", in doubt " << s.in_doubt
            << ", published " << s.published << ", skipped " << s.skipped << ", oldest pending "
            << age_text(s.oldest_pending_seconds) << "\n";
  for (const SlotStatus& slot : s.slots) {
    std::cout << "slot " << outbox::printable(slot.name) << ": "
              << (slot.walsender.empty() ? std::string("not streamed")
                                         : "streamed (walsender " + slot.walsender + ")");
    if (!slot.streamed_by.empty()) std::cout << " by relay " << outbox::printable(slot.streamed_by);
    std::cout << ", wal_status " << slot.wal_status;
    if (slot.retained) {
      std::cout << ", holds " << mebibytes(*slot.retained) << " of WAL, "
                << mebibytes(slot.unconfirmed.value_or(0)) << " not confirmed";
    } else {
      std::cout << " (its WAL is gone: a relay replaces it and publishes from the table)";
    }
    if (slot.table_less) {
      std::cout << "; registered for table-less events: the only copy of those not yet published";
    }
    if (slot.walsender.empty()) {
      std::cout << "; no relay streams it: it keeps WAL until one does, or until `outbox cdc drop "
                   "--slot "
                << outbox::printable(slot.name) << "` drops it";
    }
    for (const std::string& standby : slot.standbys) {
      std::cout << "; standby: relay " << outbox::printable(standby);
    }
    std::cout << "\n";
  }
  for (const RelaySessionStatus& relay : s.relays) {
    std::cout << "relay " << outbox::printable(relay.relay_id) << ": "
              << (relay.ended ? std::string("ended")
                              : fmt::format("seen {:.0f} s ago, {}", relay.seen_seconds_ago,
                                            relay.state()));
    if (const std::string role = relay.slot_role(); !role.empty()) {
      std::cout << ", " << outbox::printable(role);
    }
    // Its own word on the broker (or database) when that is not well.
    if (!relay.ended && !relay.health.empty() && relay.health != "running") {
      std::cout << ", says " << outbox::printable(relay.health);
    }
    if (!relay.ended) std::cout << ", published " << relay.published;
    std::cout << "\n";
  }
  for (const HeldCount& held : s.inbox_held) {
    std::cout << "inbox " << outbox::printable(held.consumer_name) << ": " << held.waiting
              << " waiting for a predecessor, " << held.parked << " parked (outbox inbox list"
              << " --consumer " << outbox::printable(held.consumer_name) << ")\n";
  }
}

nlohmann::json to_json(const OutboxStatus& s) {
  nlohmann::json slots = nlohmann::json::array();
  for (const SlotStatus& slot : s.slots) {
    slots.push_back(
        {{"name", slot.name},
         {"streamed", !slot.walsender.empty()},
         {"wal_status", slot.wal_status},
         {"retained_bytes", slot.retained ? nlohmann::json(*slot.retained) : nullptr},
         {"unconfirmed_bytes", slot.unconfirmed ? nlohmann::json(*slot.unconfirmed) : nullptr},
         {"table_less", slot.table_less},
         {"streamed_by",
          slot.streamed_by.empty() ? nlohmann::json(nullptr) : nlohmann::json(slot.streamed_by)},
         {"standbys", slot.standbys}});
  }
  nlohmann::json relays = nlohmann::json::array();
  for (const RelaySessionStatus& relay : s.relays) {
    relays.push_back(
        {{"relay_id", relay.relay_id},
         {"ended", relay.ended},
         {"listening", relay.listening},
         {"state", std::string(relay.state())},
         {"slot", relay.slot.empty() ? nlohmann::json(nullptr) : nlohmann::json(relay.slot)},
         {"slot_mode",
          relay.slot_mode.empty() ? nlohmann::json(nullptr) : nlohmann::json(relay.slot_mode)},
         {"slot_streamed", relay.slot_streamed},
         {"health", relay.health.empty() ? nlohmann::json(nullptr) : nlohmann::json(relay.health)},
         {"published", relay.published},
         {"seen_seconds_ago",
          relay.ended ? nlohmann::json(nullptr) : nlohmann::json(relay.seen_seconds_ago)}});
  }
  nlohmann::json inbox_held = nlohmann::json::array();
  for (const HeldCount& held : s.inbox_held) {
    inbox_held.push_back(
        {{"consumer", held.consumer_name}, {"waiting", held.waiting}, {"parked", held.parked}});
  }
  // Values from the table are any writer's: dump() escapes them and replaces bytes that are
  // not UTF-8, so one line stays one valid JSON object.
  // When it was read (this host's clock, UTC): one line of --watch says its own time.
  const auto now = std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  return {{"at", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", now)},
          {"pending", s.pending},
          {"in_flight", s.in_flight},
          {"retrying", s.retrying},
          {"quarantined", s.quarantined},
          {"in_doubt", s.in_doubt},
          {"published", s.published},
          {"skipped", s.skipped},
          {"oldest_pending_seconds", s.oldest_pending_seconds},
          {"slots", slots},
          {"relays", relays},
          {"inbox_held", inbox_held}};
}

void print_once(PGconn* conn, const StatusFlags& flags) {
  const OutboxStatus status = read_status(conn, SchemaName(flags.schema));
  if (flags.json) {
    std::cout << to_json(status).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else {
    print_text(status);
    std::cout << std::flush;
  }
}

int run_status(const StatusFlags& flags) {
  const SchemaName schema(flags.schema);
  auto connection = open_cli_connection(flags.db, "outbox-status");
  if (flags.watch.empty()) {
    print_once(connection.get(), flags);
    return 0;
  }
  const auto every = parse_duration(flags.watch);
  if (every < std::chrono::milliseconds(100)) {
    throw ConfigError("status: --watch must be at least 100ms, not \"" + flags.watch + "\"");
  }
  // Until SIGINT/SIGTERM/SIGHUP: a block (text, with the time) or a JSON line per interval.
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  const SignalWatch watch = on_termination_signal([&] {
    std::lock_guard lock(mutex);
    stop = true;
    wake.notify_all();
  });
  std::unique_lock lock(mutex);
  while (!stop) {
    lock.unlock();
    if (!flags.json) {
      std::cout << fmt::format(
          "--- {:%Y-%m-%d %H:%M:%S} UTC\n",
          fmt::gmtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())));
    }
    print_once(connection.get(), flags);
    if (stdout_closed("status")) return 0;  // the reader went away (`| head`): a stop
    lock.lock();
    wake.wait_for(lock, every, [&] { return stop; });
  }
  return 0;
}

}  // namespace

void register_status(Commands& commands) {
  const auto [status, flags] =
      commands.add("status", "pending, in-flight and published counts", run_status);
  Commands::add_database_options(status, flags->db, flags->schema);
  status->add_flag("--json", flags->json, "one JSON object (per line with --watch)");
  status->add_option("--watch", flags->watch,
                     "print again at this interval until interrupted, e.g. 2s");
  commands.add_password_file_option(status);
}

}  // namespace outbox::cli
