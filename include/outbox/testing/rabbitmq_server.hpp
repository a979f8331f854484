#pragma once
// A RabbitMQ node (Debian's rabbitmq-server) for the demo and the tests: started on 127.0.0.1 on a
// free port with a node name, data folder and log of its own (removed at the end), no plugins,
// the default guest user; stoppable (gently or killed) and started again on the same port with the
// same data, so durable queues and persistent messages survive as they would on a server.

#include <cstdint>
#include <memory>
#include <string>

namespace outbox {

class RabbitMqServer {
 public:
  // Starts it (about 5 to 10 s: an Erlang node). Throws ConfigError when rabbitmq-server is
  // missing (OUTBOX_RABBITMQ_SERVER may name its script) or does not come up.
  RabbitMqServer();
  ~RabbitMqServer();
  RabbitMqServer(const RabbitMqServer&) = delete;
  RabbitMqServer& operator=(const RabbitMqServer&) = delete;

  [[nodiscard]] std::string url() const;  // "amqp://guest:guest@127.0.0.1:<port>/"
  [[nodiscard]] std::uint16_t port() const;

  void stop(bool kill = false);  // SIGTERM to the node (or SIGKILL: a crash)
  void start();                  // again, same port, node name and data

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
