// What the CLI's subcommands share: where the database is and how to connect to it, secrets from
// files (database passwords, Kafka properties), so that they never stand on a command line (where
// `ps` shows them to every user) nor in a log line, signals, and how flags are read.

#include "cli/cli_common.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/settings_file.hpp"
#include "outbox/connection.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

std::string& password_file() {
  static std::string path;
  return path;
}

std::string conninfo_quoted(const std::string& value) {
  std::string quoted = "'";
  for (const char c : value) {
    if (c == '\'' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "'";
}

// `url` (URI or keyword/value) as a keyword/value string with `password` added.
std::string with_password(const std::string& url, const std::string& password) {
  char* error = nullptr;
  const std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(url.c_str(), &error), &PQconninfoFree);
  if (!options) {
    std::string why = error != nullptr ? error : "out of memory";
    if (error != nullptr) PQfreemem(error);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    throw ConfigError("--db " + outbox::redact_connection_string(url) + ": " +
                      outbox::scrub(why, outbox::connection_secrets(url)));
  }
  std::string out;
  for (const PQconninfoOption* option = options.get(); option->keyword != nullptr; ++option) {
    if (option->val == nullptr || *option->val == '\0') continue;
    if (std::strcmp(option->keyword, "password") == 0) {
      throw ConfigError("--db " + outbox::redact_connection_string(url) +
                        " has a password and a password file is given too; keep only the file");
    }
    out += std::string(option->keyword) + "=" + conninfo_quoted(option->val) + " ";
  }
  return out + "password=" + conninfo_quoted(password);
}

}  // namespace

void set_database_password_file(const std::string& path) { password_file() = path; }

std::string database_url(const std::string& flag) {
  std::string url = flag;
  if (url.empty()) {
    if (const char* env = std::getenv("OUTBOX_DATABASE_URL")) url = env;
  }
  std::string file = password_file();
  if (file.empty()) {
    if (const char* env = std::getenv("OUTBOX_DATABASE_PASSWORD_FILE")) file = env;
  }
  if (file.empty()) return url;
  return with_password(url, read_secret_file(file, "database password"));
}

Connection open_cli_connection(const std::string& db_flag, std::string_view application_name) {
  auto connection = Connection::open(database_url(db_flag), application_name);
  connection.execute(fmt::format("SET lock_timeout = {}", kCliLockTimeout.count()));
  connection.execute(fmt::format("SET statement_timeout = {}", kCliStatementTimeout.count()));
  return connection;
}

std::string read_secret_file(const std::string& path, const std::string& what) {
  const SettingsFile file = read_settings_file(path, what + " file");
  warn_if_open_to_others(file, path, what);
  std::string line = file.content.substr(0, file.content.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) throw ConfigError(what + " file " + path + " is empty");
  if (line.find('\0') != std::string::npos) {
    throw ConfigError(what + " file " + path + ": its first line holds a NUL byte");
  }
  return line;
}

std::map<std::string, std::string> read_properties_file(const std::string& path) {
  const SettingsFile file = read_settings_file(path, "Kafka properties file");
  warn_if_open_to_others(file, path, "Kafka properties");
  std::istringstream in(file.content);
  std::map<std::string, std::string> properties;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    const auto eq = line.find('=', start);
    if (eq == std::string::npos || eq == start || line.find('\0') != std::string::npos) {
      throw ConfigError("Kafka properties file " + path + ", line " + std::to_string(number) +
                        ": expected key=value");
    }
    std::string key = line.substr(start, eq - start);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    properties[key] = line.substr(eq + 1);
  }
  return properties;
}

namespace {

sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // a closed terminal or a supervisor's hangup: stop in order too
  return set;
}

// The watches armed now, the latest last. Never destroyed: the signal thread outlives main().
struct SignalWatches {
  std::mutex mutex;
  std::vector<std::weak_ptr<SignalWatch::State>> armed;
  std::string command;  // the running command, for the message of an interrupted one
};
SignalWatches& signal_watches() {
  static auto* watches = new SignalWatches;
  return *watches;
}

// Runs the latest armed watch's on_signal; false when none is armed.
bool run_armed_watch() {
  std::vector<std::shared_ptr<SignalWatch::State>> armed;
  {
    SignalWatches& watches = signal_watches();
    const std::lock_guard lock(watches.mutex);
    std::erase_if(watches.armed, [](const auto& watch) { return watch.expired(); });
    for (const auto& watch : watches.armed) {
      if (auto state = watch.lock()) armed.push_back(std::move(state));
    }
  }
  for (auto it = armed.rbegin(); it != armed.rend(); ++it) {
    const std::lock_guard lock((*it)->mutex);
    if ((*it)->on_signal) {
      (*it)->on_signal();
      return true;
    }
  }
  return false;
}

}  // namespace

void start_signal_thread(const std::string& chosen_command) {
  const sigset_t set = termination_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // every thread started from now on inherits it
  {
    SignalWatches& watches = signal_watches();
    const std::lock_guard lock(watches.mutex);
    watches.command = chosen_command;
  }
  std::thread([set] {
    for (;;) {
      int signal_number = 0;
      if (sigwait(&set, &signal_number) != 0) continue;
      if (run_armed_watch()) continue;
      // Nothing to stop in order: a command that does one job (audit, replay, migrate, ...)
      // is interrupted. Its open transaction, if any, is rolled back by the server.
      std::string command;
      {
        SignalWatches& watches = signal_watches();
        const std::lock_guard lock(watches.mutex);
        command = watches.command;
      }
      const std::string message =
          fmt::format("outbox {}: interrupted by {} before it finished; exit {}\n", command,
                      signal_number == SIGINT    ? "SIGINT"
                      : signal_number == SIGTERM ? "SIGTERM"
                                                 : "SIGHUP",
                      kExitInterrupted);
      std::fwrite(message.data(), 1, message.size(), stderr);
      std::fflush(stderr);
      std::_Exit(kExitInterrupted);
    }
  }).detach();
}

namespace {
std::atomic<bool> stdout_closure_reported{false};
}  // namespace

bool stdout_closed(const std::string& command) {
  if (std::cout) return false;
  if (!stdout_closure_reported.exchange(true)) {
    std::cerr << "outbox " << command << ": stdout is closed; stopping\n";
  }
  return true;
}

bool stdout_closure_said() { return stdout_closure_reported.load(); }

SignalWatch on_termination_signal(std::function<void()> on_signal) {
  auto state = std::make_shared<SignalWatch::State>();
  state->on_signal = std::move(on_signal);
  SignalWatches& watches = signal_watches();
  const std::lock_guard lock(watches.mutex);
  watches.armed.push_back(state);
  return SignalWatch(std::move(state));
}

void wait_for_termination() {
  static std::mutex mutex;
  static std::condition_variable cv;
  static bool stop = false;
  const SignalWatch watch = on_termination_signal([] {
    std::lock_guard lock(mutex);
    stop = true;
    cv.notify_all();
  });
  std::unique_lock lock(mutex);
  cv.wait(lock, [] { return stop; });
}

std::map<std::string, std::string> kafka_properties(const std::vector<std::string>& items) {
  std::map<std::string, std::string> properties;
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError("--kafka-property \"" + item + "\": expected key=value, e.g. linger.ms=5");
    }
    properties[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return properties;
}

std::map<std::string, std::string> KafkaFlags::merged_properties() const {
  std::map<std::string, std::string> merged;
  if (!properties_file.empty()) merged = read_properties_file(properties_file);
  for (auto& [key, value] : kafka_properties(properties)) merged[key] = value;
  return merged;
}

std::string byte_size_text(std::uint64_t bytes) {
  for (const auto& [unit, size] :
       {std::pair{"GiB", std::uint64_t{1} << 30}, std::pair{"MiB", std::uint64_t{1} << 20},
        std::pair{"KiB", std::uint64_t{1} << 10}}) {
    if (bytes != 0 && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes);
}

std::string duration_text(std::chrono::milliseconds duration) {
  const std::int64_t ms = duration.count();
  for (const auto& [unit, size] :
       {std::pair{"d", std::int64_t{86400000}}, std::pair{"h", std::int64_t{3600000}},
        std::pair{"m", std::int64_t{60000}}, std::pair{"s", std::int64_t{1000}}}) {
    if (ms != 0 && ms % size == 0) return std::to_string(ms / size) + unit;
  }
  return ms == 0 ? "0" : std::to_string(ms) + "ms";
}

std::vector<std::string> argument_secrets(int argc, char** argv) {
  std::vector<std::string> secrets;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    for (std::string& secret : outbox::connection_secrets(argument)) {
      secrets.push_back(std::move(secret));
    }
    if (const auto eq = argument.find('=');
        eq != std::string_view::npos && outbox::is_secret_kafka_property(argument.substr(0, eq))) {
      secrets.emplace_back(argument.substr(eq + 1));
    }
  }
  return secrets;
}

void decimal_integers_only(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (!type.starts_with("INT") && !type.starts_with("UINT")) continue;
    option->transform(
        CLI::Validator(
            [](std::string& value) -> std::string {
              std::size_t digits = value.starts_with('-') ? 1 : 0;
              if (digits == value.size() ||
                  value.find_first_not_of("0123456789", digits) != std::string::npos) {
                return "takes a whole decimal number, not \"" + value + "\"";
              }
              while (digits + 1 < value.size() && value[digits] == '0') value.erase(digits, 1);
              return {};
            },
            ""),
        "decimal");
  }
  for (CLI::App* sub : app.get_subcommands({})) decimal_integers_only(*sub);
}

std::string actor_or_user(const std::string& actor) {
  if (!actor.empty()) return actor;
  for (const char* variable : {"USER", "LOGNAME"}) {
    if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') return value;
  }
  // Under systemd or in a container neither is set; the account the process runs as still names
  // someone (or a service) in the audit record.
  const uid_t uid = geteuid();
  if (const passwd* entry = getpwuid(uid);
      entry != nullptr && entry->pw_name != nullptr && *entry->pw_name != '\0') {
    return entry->pw_name;
  }
  throw InvalidArgument(fmt::format(
      "say who acts with --actor NAME (it goes into the audit record): $USER and $LOGNAME are "
      "unset and user id {} has no name in the password database",
      uid));
}

std::string timestamp_flag(const std::string& text) {
  if (text.empty()) return text;
  try {
    const auto ago = parse_duration(text);
    const auto at = std::chrono::system_clock::now() - ago;
    return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z",
                       fmt::gmtime(std::chrono::system_clock::to_time_t(at)));
  } catch (const InvalidArgument&) {
    return text;
  }
}

}  // namespace outbox::cli
