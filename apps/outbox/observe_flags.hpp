#pragma once
// The flags of the HTTP listener a relay (--metrics-listen) and `outbox admin` (--listen) share,
// and the ObserveOptions they make.

#include <CLI/CLI.hpp>
#include <string>

#include "outbox/observe.hpp"

namespace outbox::cli {

struct ObserveFlags {
  std::string listen;      // empty: no listener
  std::string token_file;  // --admin-token-file
  std::string backlog_refresh = "5s";
};

// Adds `listen_flag` (its help says what it serves), --admin-token-file and --backlog-refresh;
// returns the listen option.
CLI::Option* add_observe_options(CLI::App* command, ObserveFlags& flags,
                                 const std::string& listen_flag, const std::string& listen_help);

// The options for a listener on flags.listen (which must be set), reading the token file.
ObserveOptions observe_options(const ObserveFlags& flags, const std::string& db,
                               const std::string& schema);

}  // namespace outbox::cli
