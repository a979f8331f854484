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
  // The process group its processes run in (its first process's id; -1 while stopped): the bench
  // measures the broker's CPU over it.
  [[nodiscard]] int process_group() const;

  // Declares `exchange` (durable, topic) and `queue` (durable; a quorum queue with single active
  // consumer unless `classic`) bound to it with `binding`: the topology a consumer would make,
  // for the demo and the bench, whose relays publish before (or without) any consumer. Throws
  // BrokerError.
  void declare_queue(const std::string& exchange, const std::string& queue,
                     const std::string& binding, bool classic = false) const;

  void stop(bool kill = false);  // SIGTERM to the node (or SIGKILL: a crash)
  void pause();                  // SIGSTOP: a node that stops reading its connections
  void resume();                 // SIGCONT
  void start();                  // again, same port, node name and data

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
