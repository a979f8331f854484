// What every outbox program does around its commands (program.hpp).

#include "cli/program.hpp"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>
#include <string_view>
#include <utility>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "cli/config_file.hpp"
#include "outbox/error.hpp"
#include "outbox/fault_injection.hpp"
#include "outbox/log.hpp"
#include "outbox/text.hpp"

namespace {

using namespace outbox::cli;

// "; `outbox-dev demo` runs it" when `command` is the other program's, else "".
std::string other_program_hint(const std::string& command, const std::string& program) {
  const std::string_view owner = program_of(command);
  if (owner.empty() || owner == program) return {};
  return "; it is " + std::string(owner) + "'s: `" + std::string(owner) + " " + command +
         "` runs it";
}

// The commands `program` registered are exactly kCommandPrograms' for it; else a message naming
// the first difference (a command added to one and not the other).
std::string command_table_problem(const CLI::App& app, const std::string& program) {
  std::size_t registered = 0;
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    ++registered;
    if (program_of(command->get_name()) != program) {
      return "command \"" + command->get_name() + "\" is not " + program +
             "'s in kCommandPrograms (apps/cli/command.hpp)";
    }
  }
  std::size_t listed = 0;
  for (const auto& [name, owner] : kCommandPrograms) listed += owner == program ? 1 : 0;
  if (listed != registered) {
    return "kCommandPrograms (apps/cli/command.hpp) names " + std::to_string(listed) +
           " commands of " + program + ", which registered " + std::to_string(registered);
  }
  return {};
}

// CLI11 quotes the arguments it could not place, and one may be a --db URI with its password or a
// secret Kafka property: print its message without them.
// Every argument error exits kExitError (2), as every other configuration error does; --help
// exits 0.
int report_parse_error(CLI::App& app, const CLI::ParseError& e, int argc, char** argv,
                       const std::string& program) {
  std::ostringstream out;
  std::ostringstream err;
  const auto secrets = argument_secrets(argc, argv);
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && app.get_subcommands().empty()) {
    // CLI11 says "A subcommand is required" also when a command's name was misspelt.
    const std::vector<std::string> rest = app.remaining();
    err << program << ": "
        << (rest.empty() ? std::string("say which command to run")
                         : "no command \"" + outbox::printable(rest.front(), 40) + "\"" +
                               other_program_hint(rest.front(), program))
        << "; `" << program << " --help` lists them\n";
  } else {
    app.exit(e, out, err);
  }
  std::cout << outbox::scrub(out.str(), secrets);
  std::cerr << outbox::scrub(err.str(), secrets);
  return e.get_exit_code() == 0 ? 0 : kExitError;
}

// Runs the chosen command; an error becomes a message on stderr and exit code 2 (an outbox error:
// configuration, database, broker) or 3 (anything else).
int run(const Commands& commands, const std::string& program) {
  try {
    outbox::arm_faults_from_environment();  // tests only: the crash campaign arms the relays
    const int code = commands.run_chosen();
    // A report that could not be written (stdout closed, disk full) is not a success.
    if (!(std::cout << std::flush) && code == 0 && !stdout_closure_said()) {
      std::cerr << program << ": could not write to stdout (closed, or its disk is full)\n";
      return kExitError;
    }
    return code;
  } catch (const outbox::DatabaseError& e) {
    std::string hint;
    if (e.sqlstate() == "55P03") {
      hint =
          "; another session holds a lock on outbox's tables (LOCK TABLE, a migration, VACUUM "
          "FULL): find it in pg_locks and pg_stat_activity, then try again";
    } else if (e.sqlstate() == "57014") {
      hint = "; the statement ran out of time (statement_timeout)";
    } else if (e.sqlstate() == "42703" &&
               std::string_view(e.what()).find("outbox") != std::string_view::npos) {
      hint = "; a column of outbox's tables is missing: run `outbox migrate` with this build";
    } else if ((e.sqlstate() == "42P01" || e.sqlstate() == "3F000") &&
               std::string_view(e.what()).find("outbox") != std::string_view::npos) {
      // An undefined table or schema of outbox's: never migrated, or another --schema.
      hint =
          "; outbox's tables are not there: run `outbox migrate` (with the same --schema) first, "
          "or name the schema that holds them with --schema";
    }
    std::cerr << program << ": " << e.what() << hint << (e.retryable() ? " (retryable)" : "")
              << "\n";
    return 2;
  } catch (const outbox::Error& e) {
    std::cerr << program << ": " << e.what() << (e.retryable() ? " (retryable)" : "") << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": unexpected error: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace

namespace outbox::cli {

int run_program(int argc, char** argv, const std::string& program, const std::string& description,
                void (*register_commands)(Commands&)) {
  // Output to a closed pipe (`outbox relay | head`, a log shipper that died) fails that write; it
  // must not kill a relay between its ack and its mark.
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{description};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows every default
  // Before or after the command's name: `outbox relay --log-format json ...` reads naturally.
  app.fallthrough();
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text (for a person) or json (one object per line, for a log pipeline; "
                 "OUTBOX_LOG_FORMAT=json does the same)")
      ->check(CLI::IsMember({"text", "json"}));

  Commands commands(app);
  register_commands(commands);
  if (const std::string problem = command_table_problem(app, program); !problem.empty()) {
    std::cerr << program << ": internal error: " << problem << "\n";
    return 3;
  }
  decimal_integers_only(app);
  add_config_option(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e, argc, argv, program);
  }
  if (app.get_option("--log-format")->count() > 0) {  // else OUTBOX_LOG_FORMAT decides
    outbox::set_log_format(log_format == "json" ? outbox::LogFormat::json
                                                : outbox::LogFormat::text);
  }
  set_database_password_file(commands.password_file());
  std::string chosen;
  for (const CLI::App* command : app.get_subcommands()) chosen = command->get_name();
  start_signal_thread(chosen);  // before any thread starts: all of them inherit its mask
  return run(commands, program);
}

}  // namespace outbox::cli
