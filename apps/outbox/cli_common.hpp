#pragma once
// Shared by the CLI's subcommands: where the database is, how to stop on a signal.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pg/connection.hpp"

namespace outbox::cli {

// The password file every subcommand's --db-password-file names (else
// $OUTBOX_DATABASE_PASSWORD_FILE); set by main() before a command runs.
void set_database_password_file(const std::string& path);

// --db, else $OUTBOX_DATABASE_URL, else "" (libpq then reads the PG* variables), with the
// password from the password file added when one is given. Throws ConfigError when the file
// cannot be read or the string already has a password.
std::string database_url(const std::string& flag);

// An operator's command gives up rather than hang: a lock held elsewhere (LOCK TABLE, a migration,
// VACUUM FULL) for longer than kCliLockTimeout, or a statement that runs longer than
// kCliStatementTimeout, ends it with an error that says so (SQLSTATE 55P03 or 57014).
inline constexpr std::chrono::milliseconds kCliLockTimeout{5000};
inline constexpr std::chrono::milliseconds kCliStatementTimeout{300000};

// Connects for status, quarantine and cleanup, with the timeouts above.
pg::Connection open_cli_connection(const std::string& db_flag, std::string_view application_name);

// Reads a secret from a file: its first line, without the line end. Warns on stderr when others
// may read the file. Throws ConfigError naming the file (never its content).
std::string read_secret_file(const std::string& path, const std::string& what);

// key=value lines of a librdkafka properties file ('#' comments and blank lines skipped), for
// secrets that must not stand on a command line. Throws ConfigError naming the file and line.
std::map<std::string, std::string> read_properties_file(const std::string& path);

// Blocks SIGINT, SIGTERM and SIGHUP in every thread started after this call and runs `on_signal` on
// a dedicated thread when one arrives (so it may take locks, unlike a signal handler).
void on_termination_signal(std::function<void()> on_signal);

struct DemoOptions {
  std::string database_url;   // empty: embedded PostgreSQL
  std::string kafka_brokers;  // empty: embedded Kafka mock cluster
  int orders = 3000;
  int writers = 4;
  int relays = 2;
  int rollback_percent = 10;
  int customers = 20;
  bool json = false;
  bool quiet = false;
};

struct QuarantineFlags {
  std::string db;
  std::string schema = "outbox";
  std::string action;  // list | retry | skip
  std::vector<std::string> event_ids;
  std::string actor;
  std::string reason;
  bool json = false;
};

// `outbox quarantine list|retry|skip`; returns the exit code.
int run_quarantine(const QuarantineFlags& flags);

struct CleanupFlags {
  std::string db;
  std::string schema = "outbox";
  std::string retention = "7d";
  std::string inbox_retention;         // empty: keep inbox ids
  bool allow_short_retention = false;  // tests only: below 1h
  std::size_t batch_size = 5000;
  std::string pause = "0";
  std::string every;  // empty: once
  bool dry_run = false;
  bool json = false;
};

// `outbox cleanup`; returns the exit code.
int run_cleanup(const CleanupFlags& flags);

struct BenchOptions {
  std::string database_url;       // empty: embedded PostgreSQL
  std::string kafka_brokers;      // empty: embedded Kafka mock cluster
  std::int64_t events = 1000000;  // backlog size for ceiling and drain
  int aggregates = 10000;
  int payload_bytes = 200;
  std::string shared_buffers = "1GB";         // embedded PostgreSQL only
  std::vector<std::string> kafka_properties;  // key=value, passed to each Kafka relay
  int clients = 4;                            // producer connections (producer and live)
  double seconds = 10;                        // per producer comparison and per live rate
  std::vector<int> rates = {1000, 5000};      // live offered rates; "max" always follows
  int relays = 2;                             // relay processes for ceiling and drain
  std::size_t batch_size = 500;               // relay
  std::size_t max_in_flight = 10000;          // relay
  int timeout_seconds = 900;                  // per backlog
  std::vector<std::string> only;              // scenarios to run; empty: all
  bool durable_marks = false;                 // relays commit marks synchronously
  std::string out_dir = "bench-results";
};

// `outbox bench`; returns the exit code.
int run_bench(const BenchOptions& options);

// Runs the end-to-end demo and returns the process exit code (0 when every invariant held).
int run_demo(const DemoOptions& options);

}  // namespace outbox::cli
