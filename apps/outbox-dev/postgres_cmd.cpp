// `outbox postgres`: a private PostgreSQL cluster, until stopped; prints its connection string.

#include <iostream>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/testing/embedded_postgres.hpp"

namespace outbox::cli {

void register_postgres(Commands& commands) {
  commands.add("postgres",
               "run a private PostgreSQL cluster until stopped; prints its connection string", [] {
                 EmbeddedPostgres postgres;
                 std::cout << postgres.connection_string() << std::endl;
                 wait_for_termination();
                 return 0;
               });
}

}  // namespace outbox::cli
