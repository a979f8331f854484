#pragma once
// A Redis server (Debian's redis-server) for the demo and the tests: started on 127.0.0.1 on a
// free port with a data folder of its own (removed at the end), persistence as the relay wants it
// (an append-only file fsynced before each reply: appendonly yes, appendfsync always) unless
// asked otherwise; stoppable (gently or killed) and started again on the same port with the same
// data, so streams survive a restart as on a server.

#include <cstdint>
#include <memory>
#include <string>

namespace outbox {

struct RedisServerOptions {
  bool durable = true;     // false: no AOF, no snapshots (what the relay refuses by default)
  std::string password{};  // non-empty: requirepass
};

class RedisServer {
 public:
  // Starts it. Throws ConfigError when redis-server is missing (OUTBOX_REDIS_SERVER may name it)
  // or does not come up.
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  [[nodiscard]] std::string url() const;  // "redis://127.0.0.1:<port>" (with the password)
  [[nodiscard]] std::uint16_t port() const;
  // The process group its processes run in (its first process's id; -1 while stopped): the bench
  // measures the broker's CPU over it.
  [[nodiscard]] int process_group() const;

  void stop(bool kill = false);  // SIGTERM (or SIGKILL: a crash)
  void start();                  // again, same port and data
  void pause();                  // SIGSTOP: a server that stalls
  void resume();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
