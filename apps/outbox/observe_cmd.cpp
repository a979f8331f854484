// `outbox admin`: serves the database-wide backlog gauges, /healthz and /readyz (and the admin
// page) without relaying anything, so a backlog alert still fires when every relay has stopped.
// Also the listener flags `outbox relay --metrics-listen` shares (observe_flags.hpp).

#include <condition_variable>
#include <iostream>
#include <mutex>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "observe_flags.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"

namespace outbox::cli {

CLI::Option* add_observe_options(CLI::App* command, ObserveFlags& flags,
                                 const std::string& listen_flag, const std::string& listen_help) {
  CLI::Option* listen = command->add_option(listen_flag, flags.listen, listen_help);
  command->add_option("--admin-token-file", flags.token_file,
                      "a file whose first line is the bearer token every request but /healthz "
                      "and /readyz must carry; required when listening beyond loopback");
  command
      ->add_option("--backlog-refresh", flags.backlog_refresh,
                   "how often the backlog gauges' query may run, e.g. 5s")
      ->capture_default_str();
  return listen;
}

ObserveOptions observe_options(const ObserveFlags& flags, const std::string& db,
                               const std::string& schema) {
  ObserveOptions options;
  options.listen = flags.listen;
  if (!flags.token_file.empty()) {
    options.token = read_secret_file(flags.token_file, "--admin-token-file");
  }
  options.backlog_refresh = parse_duration(flags.backlog_refresh);
  options.database_url = database_url(db);  // with OUTBOX_DATABASE_URL and the password file
  options.schema = SchemaName(schema);
  return options;
}

namespace {

struct AdminFlags {
  std::string db;
  std::string schema = SchemaName().name();
  ObserveFlags observe{"127.0.0.1:9465", {}, "5s"};
};

int run_admin(const AdminFlags& flags) {
  if (flags.observe.listen.empty()) throw ConfigError("admin: --listen host:port is required");
  ObserveServer server(observe_options(flags.observe, flags.db, flags.schema));
  // Before start(): the server's threads inherit the blocked signals. Started after them, one
  // of its threads took SIGTERM, whose default action killed the process (status 143, no stop).
  std::mutex mutex;
  std::condition_variable signalled;
  bool stop = false;
  const SignalWatch watch = on_termination_signal([&] {
    std::lock_guard lock(mutex);
    stop = true;
    signalled.notify_all();
  });
  server.start();
  std::cerr << "outbox admin: serving on port " << server.port() << " (Ctrl-C stops)" << std::endl;
  {
    std::unique_lock lock(mutex);
    signalled.wait(lock, [&] { return stop; });
  }
  server.stop();
  return 0;
}

}  // namespace

void register_admin(Commands& commands) {
  auto [admin, flags] = commands.add<AdminFlags>(
      "admin",
      "serve the backlog gauges (/metrics), /healthz and /readyz without relaying: backlog "
      "alerts keep firing when every relay has stopped",
      &run_admin);
  Commands::add_database_options(admin, flags->db, flags->schema);
  add_observe_options(admin, flags->observe, "--listen", "host:port to serve on")
      ->capture_default_str();
  commands.add_password_file_option(admin);
}

}  // namespace outbox::cli
