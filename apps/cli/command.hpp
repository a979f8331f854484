#pragma once
// The CLI's subcommands. Each command's file defines its register_<command>(Commands&): it adds the
// subcommand with its flags (defaults from the library's options structs) and says what runs when
// that subcommand is chosen. Each program's main() names its commands and run_program()
// (program.hpp) registers them, parses, and runs the chosen one.
//
// A new command: a file with its register function, declared below and called from the main() of
// its program (apps/outbox for the operator's, apps/outbox-dev for the developer's).

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/cli_common.hpp"

namespace outbox::cli {

class Commands {
 public:
  explicit Commands(CLI::App& app) : app_(app) {}

  // Adds subcommand `name`; `run` returns the process exit code when it was chosen. `run` must
  // own (or share) the flags its options write into: they are read after parsing.
  CLI::App* add(const std::string& name, const std::string& description, std::function<int()> run) {
    CLI::App* command = app_.add_subcommand(name, description);
    commands_.emplace_back(command, std::move(run));
    return command;
  }

  // A subcommand whose flags live in a `Flags` (default-initialised: the defaults --help shows);
  // `run(flags)` runs when it was chosen. Returns the subcommand, to add options to, and its flags.
  template <class Flags>
  std::pair<CLI::App*, std::shared_ptr<Flags>> add(const std::string& name,
                                                   const std::string& description,
                                                   int (*run)(const Flags&)) {
    auto flags = std::make_shared<Flags>();
    return {add(name, description, [flags, run] { return run(*flags); }), flags};
  }

  // --db and --schema of a command that works on outbox's tables.
  static void add_database_options(CLI::App* command, std::string& db, std::string& schema) {
    command->add_option("--db", db, "libpq connection string or URI");
    command->add_option("--schema", schema, "schema holding outbox_events");
  }

  // --kafka-brokers, --kafka-property and --kafka-properties-file.
  static void add_kafka_options(CLI::App* command, KafkaFlags& kafka) {
    command->add_option("--kafka-brokers", kafka.brokers, "bootstrap servers host:port,...");
    command->add_option("--kafka-property", kafka.properties, "librdkafka property key=value");
    command->add_option("--kafka-properties-file", kafka.properties_file,
                        "librdkafka properties, key=value per line (for secrets: ps shows flags)");
  }

  // --db-password-file on a command that connects to the user's database (one value for all).
  void add_password_file_option(CLI::App* command) {
    command->add_option("--db-password-file", password_file_,
                        "the database password, from the first line of this file (default: "
                        "$OUTBOX_DATABASE_PASSWORD_FILE; libpq's PGPASSFILE works too)");
  }
  [[nodiscard]] const std::string& password_file() const { return password_file_; }

  // The chosen command's exit code (the app requires exactly one).
  [[nodiscard]] int run_chosen() const {
    for (const auto& [command, run] : commands_) {
      if (command->parsed()) return run();
    }
    return 0;
  }

 private:
  CLI::App& app_;
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands_;
  std::string password_file_;
};

// Which program has each command: `outbox`, the operator's, or `outbox-dev`, the developer's,
// whose commands start throwaway servers of their own unless told otherwise. run_program() refuses
// to start when a program registered other commands than these (every CLI test would see it), and
// `outbox demo` says where demo is from this table.
inline constexpr std::string_view kOperatorProgram = "outbox";
inline constexpr std::string_view kDevProgram = "outbox-dev";
inline constexpr std::pair<std::string_view, std::string_view> kCommandPrograms[] = {
    {"migrate", kOperatorProgram}, {"enqueue", kOperatorProgram}, {"relay", kOperatorProgram},
    {"status", kOperatorProgram},  {"admin", kOperatorProgram},   {"quarantine", kOperatorProgram},
    {"replay", kOperatorProgram},  {"audit", kOperatorProgram},   {"cleanup", kOperatorProgram},
    {"tail", kOperatorProgram},    {"cdc", kOperatorProgram},     {"reconcile", kOperatorProgram},
    {"inbox", kOperatorProgram},   {"consume", kOperatorProgram}, {"demo", kDevProgram},
    {"bench", kDevProgram},        {"postgres", kDevProgram},     {"kafka-mock", kDevProgram}};

// The program that has `command`; "" for a name that is no command.
constexpr std::string_view program_of(std::string_view command) {
  for (const auto& [name, owner] : kCommandPrograms) {
    if (name == command) return owner;
  }
  return {};
}

// outbox's commands (apps/outbox).
void register_migrate(Commands& commands);
void register_enqueue(Commands& commands);
void register_relay(Commands& commands);
void register_status(Commands& commands);
void register_admin(Commands& commands);
void register_quarantine(Commands& commands);
void register_inbox(Commands& commands);
void register_consume(Commands& commands);
void register_replay(Commands& commands);
void register_audit(Commands& commands);
void register_cleanup(Commands& commands);
void register_tail(Commands& commands);
void register_cdc(Commands& commands);
void register_reconcile(Commands& commands);
// outbox-dev's (apps/outbox-dev).
void register_kafka_mock(Commands& commands);
void register_postgres(Commands& commands);
void register_demo(Commands& commands);
void register_bench(Commands& commands);

}  // namespace outbox::cli
