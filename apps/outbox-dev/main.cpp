// outbox-dev: the developer's program, beside the operator's `outbox` as pgbench sits beside psql.
// It starts throwaway servers (an embedded PostgreSQL, librdkafka's Kafka mock cluster), runs the
// demo on them, and measures the relay (bench, which runs `outbox relay` processes: the `outbox`
// binary next to this one). Nothing here is needed in production.

#include "cli/program.hpp"

namespace {

void register_commands(outbox::cli::Commands& commands) {
  using namespace outbox::cli;
  register_demo(commands);
  register_bench(commands);
  register_postgres(commands);
  register_kafka_mock(commands);
}

}  // namespace

int main(int argc, char** argv) {
  return outbox::cli::run_program(argc, argv, "outbox-dev",
                                  "outbox-dev: the demo, the benchmark and throwaway servers for "
                                  "trying outbox (not for production)",
                                  register_commands);
}
