#pragma once
// A NATS server with JetStream (Debian's nats-server) for the demo and the tests: started on
// 127.0.0.1 on a free port, its file store in a folder of its own that is removed at the end,
// stoppable (gently or killed) and started again on the same port with the same store.

#include <cstdint>
#include <memory>
#include <string>

namespace outbox {

class NatsServer {
 public:
  // Starts it. Throws ConfigError when nats-server is missing (OUTBOX_NATS_SERVER may name it)
  // or does not come up.
  NatsServer();
  ~NatsServer();
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  [[nodiscard]] std::string url() const;  // "nats://127.0.0.1:<port>"
  [[nodiscard]] std::uint16_t port() const;
  // The process group its processes run in (its first process's id; -1 while stopped): the bench
  // measures the broker's CPU over it.
  [[nodiscard]] int process_group() const;
  [[nodiscard]] std::string store_dir() const;

  void stop(bool kill = false);  // SIGTERM (or SIGKILL: a crash)
  void start();                  // again, same port and store

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
