// `outbox status`: how many events wait, are in flight, retry, sit in quarantine, went out; the
// replication slots of change-data-capture relays, with the WAL they hold back; and the relay
// sessions. As text or one JSON object (--json), once or at an interval (--watch).

#include <fmt/format.h>

#include <fmt/chrono.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "common/printable.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/schema.hpp"
#include "pg/connection.hpp"

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

// What `outbox status` reads, once.
struct Slot {
  std::string name;
  std::string walsender;   // its pid; empty: not streamed
  std::string wal_status;
  std::optional<std::int64_t> retained;     // bytes; nullopt: its WAL is gone
  std::optional<std::int64_t> unconfirmed;  // bytes
  bool table_less = false;
};
struct RelayRow {
  std::string relay_id;
  bool listening = false;
  double seen_seconds_ago = 0;
  bool ended = false;
};
struct Status {
  std::int64_t pending = 0, in_flight = 0, retrying = 0, quarantined = 0, published = 0,
               skipped = 0;
  double oldest_pending_seconds = 0;
  std::vector<Slot> slots;
  std::vector<RelayRow> relays;
};

std::optional<std::int64_t> optional_int(const pg::Result& r, int row, int column) {
  if (r.is_null(row, column)) return std::nullopt;
  return r.int64(row, column);
}

Status read_status(PGconn* conn, const SchemaName& schema) {
  Status status;
  const std::string events = schema.table("outbox_events");
  const auto counts = pg::exec(
      conn,
      "WITH pending AS (SELECT * FROM " + events +
          " WHERE published_at IS NULL AND skipped_at IS NULL)"
          " SELECT (SELECT count(*) FROM pending),"
          "        (SELECT count(*) FROM pending WHERE claim_until > now()),"
          "        (SELECT count(*) FROM pending WHERE attempt_count > 0 AND quarantined_at IS "
          "NULL),"
          "        (SELECT count(*) FROM pending WHERE quarantined_at IS NOT NULL),"
          "        (SELECT count(*) FROM " + events + " WHERE published_at IS NOT NULL),"
          "        (SELECT count(*) FROM " + events + " WHERE skipped_at IS NOT NULL),"
          "        (SELECT coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8"
          "         FROM pending)");
  status.pending = counts.int64(0, 0);
  status.in_flight = counts.int64(0, 1);
  status.retrying = counts.int64(0, 2);
  status.quarantined = counts.int64(0, 3);
  status.published = counts.int64(0, 4);
  status.skipped = counts.int64(0, 5);
  status.oldest_pending_seconds = std::stod(std::string(counts.text(0, 6)));

  // The logical slots change-data-capture relays stream from (pgoutput, this database), with the
  // WAL each holds back: what `--wal-budget` and max_slot_wal_keep_size bound.
  const auto slots = pg::exec(
      conn,
      "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
      "ELSE pg_current_wal_lsn() END AS lsn) "
      "SELECT slot_name, coalesce(active_pid::text, ''), coalesce(wal_status, ''), "
      "pg_wal_lsn_diff(here.lsn, restart_lsn)::bigint, "
      "pg_wal_lsn_diff(here.lsn, confirmed_flush_lsn)::bigint, "
      "(slot_name::text IN (SELECT slot_name FROM " +
          schema.table("outbox_table_less_slots") +
          "))::text "
          "FROM pg_replication_slots, here WHERE slot_type = 'logical' AND plugin = 'pgoutput' "
          "AND database = current_database() ORDER BY slot_name");
  for (int row = 0; row < slots.rows(); ++row) {
    status.slots.push_back({std::string(slots.text(row, 0)), std::string(slots.text(row, 1)),
                            std::string(slots.text(row, 2)), optional_int(slots, row, 3),
                            optional_int(slots, row, 4), slots.text(row, 5) == "true"});
  }
  // The relay sessions the table knows, newest first (ended ones go once their leases are over).
  const auto relays = pg::exec(
      conn, "SELECT relay_id, listening::text, "
            // An ended session's seen_at is -infinity: no age (PostgreSQL 15 refuses the sum).
            "CASE WHEN isfinite(seen_at) THEN extract(epoch FROM now() - seen_at)::float8::text "
            "ELSE '-1' END, "
            "(ended_at IS NOT NULL)::text FROM " +
                schema.table("outbox_relays") + " ORDER BY seen_at DESC LIMIT 100");
  for (int row = 0; row < relays.rows(); ++row) {
    const std::string ago(relays.text(row, 2));
    status.relays.push_back({std::string(relays.text(row, 0)), relays.text(row, 1) == "true",
                             std::stod(ago),
                             relays.text(row, 3) == "true"});
  }
  return status;
}

void print_text(const Status& s) {
  std::cout << "pending " << s.pending << " (in flight " << s.in_flight << ", retrying "
            << s.retrying << ", quarantined " << s.quarantined << "), published " << s.published
            << ", skipped " << s.skipped << ", oldest pending "
            << fmt::format("{:g}", s.oldest_pending_seconds) << " s\n";
  for (const Slot& slot : s.slots) {
    std::cout << "slot " << detail::printable(slot.name) << ": "
              << (slot.walsender.empty() ? std::string("not streamed")
                                         : "streamed (walsender " + slot.walsender + ")")
              << ", wal_status " << slot.wal_status;
    if (slot.retained) {
      std::cout << ", holds " << mebibytes(*slot.retained) << " of WAL, "
                << mebibytes(slot.unconfirmed.value_or(0)) << " not confirmed";
    } else {
      std::cout << " (its WAL is gone: a relay replaces it and publishes from the table)";
    }
    if (slot.table_less) {
      std::cout << "; registered for table-less events: the only copy of those not yet published";
    }
    std::cout << "\n";
  }
  for (const RelayRow& relay : s.relays) {
    std::cout << "relay " << detail::printable(relay.relay_id) << ": "
              << (relay.ended ? std::string("ended")
                              : fmt::format("seen {:.0f} s ago, {}", relay.seen_seconds_ago,
                                            relay.listening ? "waiting for work" : "working"))
              << "\n";
  }
}

nlohmann::json to_json(const Status& s) {
  nlohmann::json slots = nlohmann::json::array();
  for (const Slot& slot : s.slots) {
    slots.push_back({{"name", slot.name},
                     {"streamed", !slot.walsender.empty()},
                     {"wal_status", slot.wal_status},
                     {"retained_bytes", slot.retained ? nlohmann::json(*slot.retained) : nullptr},
                     {"unconfirmed_bytes",
                      slot.unconfirmed ? nlohmann::json(*slot.unconfirmed) : nullptr},
                     {"table_less", slot.table_less}});
  }
  nlohmann::json relays = nlohmann::json::array();
  for (const RelayRow& relay : s.relays) {
    relays.push_back({{"relay_id", relay.relay_id},
                      {"ended", relay.ended},
                      {"listening", relay.listening},
                      {"seen_seconds_ago", relay.ended ? nlohmann::json(nullptr)
                                                       : nlohmann::json(relay.seen_seconds_ago)}});
  }
  // Values from the table are any writer's: dump() escapes them and replaces bytes that are
  // not UTF-8, so one line stays one valid JSON object.
  return {{"pending", s.pending},
          {"in_flight", s.in_flight},
          {"retrying", s.retrying},
          {"quarantined", s.quarantined},
          {"published", s.published},
          {"skipped", s.skipped},
          {"oldest_pending_seconds", s.oldest_pending_seconds},
          {"slots", slots},
          {"relays", relays}};
}

void print_once(PGconn* conn, const StatusFlags& flags) {
  const Status status = read_status(conn, SchemaName(flags.schema));
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
      std::cout << fmt::format("--- {:%Y-%m-%d %H:%M:%S} UTC\n",
                               fmt::gmtime(std::chrono::system_clock::to_time_t(
                                   std::chrono::system_clock::now())));
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
