#pragma once
// Shared by the CLI's subcommands: where the database is, secrets from files, how to stop on a
// signal, and how flags are read and their errors printed.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/connection.hpp"

namespace CLI {
class App;
}

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
Connection open_cli_connection(const std::string& db_flag, std::string_view application_name);

// Reads a secret from a file: its first line, without the line end. Warns on stderr when others
// may read the file. Throws ConfigError naming the file (never its content).
std::string read_secret_file(const std::string& path, const std::string& what);

// key=value lines of a librdkafka properties file ('#' comments and blank lines skipped), for
// secrets that must not stand on a command line. Throws ConfigError naming the file and line.
std::map<std::string, std::string> read_properties_file(const std::string& path);

// The Kafka flags of a command that talks to the user's brokers (Commands::add_kafka_options).
struct KafkaFlags {
  std::string brokers;                  // --kafka-brokers
  std::vector<std::string> properties;  // --kafka-property key=value
  std::string properties_file;          // --kafka-properties-file: key=value lines (for secrets)
  // The file's properties, then the flags' (a flag wins).
  [[nodiscard]] std::map<std::string, std::string> merged_properties() const;
};

// Exit codes every command keeps (docs/OPERATIONS.md, "Exit status"): 0 done (also a service
// stopped by SIGTERM, SIGINT or SIGHUP), 1 the command's check failed (audit's loss, replay's
// wait), 2 an error (bad flags or configuration, database, broker), 3 an unexpected error, 4 audit
// found nothing to audit, 130 a one-job command interrupted by SIGTERM, SIGINT or SIGHUP.
inline constexpr int kExitError = 2;
inline constexpr int kExitInterrupted = 130;

// Called by main() before a command runs, before any thread starts: blocks SIGINT, SIGTERM and
// SIGHUP in every thread and starts the one thread that takes them. A signal runs the latest
// armed watch's on_signal (on_termination_signal); with none armed, the command is interrupted:
// a line on stderr naming `command` and the signal, and exit kExitInterrupted.
void start_signal_thread(const std::string& command);

// For a command that prints until stopped (status --watch): true when stdout failed (its reader
// went away), after saying once on stderr that `command` stops. main() then does not report the
// unwritten output as an error.
bool stdout_closed(const std::string& command);
[[nodiscard]] bool stdout_closure_said();

// Arms `on_signal` for SIGINT, SIGTERM and SIGHUP (start_signal_thread must have run): it runs on
// the signal thread (so it may take locks, unlike a signal handler), as long as the returned
// watch lives: its destructor waits for a call in progress and disarms it, so `on_signal` may
// capture the caller's locals by reference (also when the caller throws).
class SignalWatch {
 public:
  struct State {
    std::mutex mutex;
    std::function<void()> on_signal;  // empty once disarmed
  };
  explicit SignalWatch(std::shared_ptr<State> state) : state_(std::move(state)) {}
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch() {
    const std::lock_guard lock(state_->mutex);
    state_->on_signal = nullptr;
  }

 private:
  std::shared_ptr<State> state_;
};
[[nodiscard]] SignalWatch on_termination_signal(std::function<void()> on_signal);

// Who performs an operator action, for the audit: --actor, else $USER or $LOGNAME. Throws
// InvalidArgument when none is known.
std::string actor_or_user(const std::string& actor);

// A time flag: a duration ("2h") means that long ago by this host's clock, as UTC ISO 8601;
// anything else is passed on for PostgreSQL to read as timestamptz. Empty stays empty.
std::string timestamp_flag(const std::string& text);

// Runs until SIGINT, SIGTERM or SIGHUP.
void wait_for_termination();

// --kafka-property key=value items as a map (a later key wins). Throws ConfigError on an item
// without a key or '='.
std::map<std::string, std::string> kafka_properties(const std::vector<std::string>& items);

// A default from an options struct as a flag takes it back: 64 MiB as "64MiB", 7 days as "7d".
std::string byte_size_text(std::uint64_t bytes);
std::string duration_text(std::chrono::milliseconds duration);

// Every secret the command line holds: passwords of connection strings, values of Kafka properties
// that hold secrets. Argument errors are scrubbed of them before they are printed.
std::vector<std::string> argument_secrets(int argc, char** argv);

// CLI11 reads integers with strtoll base 0: "010" would be 8 and "0x10" 16. Makes every integer
// flag of `app` and its subcommands take plain decimal only (leading zeros read as decimal).
void decimal_integers_only(CLI::App& app);

}  // namespace outbox::cli
