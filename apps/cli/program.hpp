#pragma once
// What every outbox program (`outbox`, the operator's; `outbox-dev`, the developer's) does around
// its commands: --log-format and --config, decimal-only integers, parse errors scrubbed of
// secrets (exit 2), SIGPIPE ignored, TERM/INT/HUP taken by one thread (cli_common.hpp), and an
// error of the chosen command turned into one line on stderr and exit code 2 (an outbox error:
// configuration, database, broker) or 3 (anything else).

#include <string>

#include "cli/command.hpp"

namespace outbox::cli {

// Registers the program's commands with `register_commands`, parses, and runs the chosen one;
// returns the exit code. `program` prefixes every message ("outbox: ...").
int run_program(int argc, char** argv, const std::string& program, const std::string& description,
                void (*register_commands)(Commands&));

}  // namespace outbox::cli
