// outbox: the operator's program. One subcommand per job, each in its own file (cli/command.hpp);
// each validates its flags before touching anything and exits non-zero with a message that says
// what to change. It links no embedded server: the demo, the benchmark and the throwaway servers
// are outbox-dev's (apps/outbox-dev).

#include "cli/program.hpp"

namespace {

// In the order `outbox --help` lists them.
void register_commands(outbox::cli::Commands& commands) {
  using namespace outbox::cli;
  register_migrate(commands);
  register_enqueue(commands);
  register_relay(commands);
  register_status(commands);
  register_admin(commands);
  register_quarantine(commands);
  register_inbox(commands);
  register_consume(commands);
  register_replay(commands);
  register_audit(commands);
  register_cleanup(commands);
  register_tail(commands);
  register_cdc(commands);
  register_reconcile(commands);
}

}  // namespace

int main(int argc, char** argv) {
  return outbox::cli::run_program(argc, argv, "outbox",
                                  "outbox: transactional outbox for PostgreSQL", register_commands);
}
