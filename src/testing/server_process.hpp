#pragma once
// A broker server the tests and the demo start themselves (nats-server, redis-server, ...): a
// child process on 127.0.0.1 and a port chosen once, its output in a log file, stopped gently or
// killed, and started again on the same port.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace outbox::detail {

// A TCP port on 127.0.0.1 nobody listens on now (the kernel's choice; free again at once).
std::uint16_t free_loopback_port();

// The program `name` from the environment variable `env` (a path), else the first of `paths`
// that exists, else the one on PATH. Throws ConfigError naming the Debian package to install.
std::filesystem::path find_program(const std::string& name, const char* env,
                                   const std::vector<std::filesystem::path>& paths,
                                   const std::string& package);

class ServerProcess {
 public:
  // `ready`: a line the server writes to its log once it serves (empty: listening is enough).
  ServerProcess(std::filesystem::path program, std::vector<std::string> args,
                std::filesystem::path log, std::uint16_t port, std::string ready = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts it and waits until its port accepts a connection. Throws ConfigError with the end of
  // its log when it exits or does not listen within `limit`.
  void start(std::chrono::milliseconds limit = std::chrono::seconds(20));
  // SIGTERM and a wait (then SIGKILL), or SIGKILL at once (`kill`): a crash.
  void stop(bool kill = false);
  // SIGSTOP / SIGCONT to the whole group: a server that stalls (stops reading its sockets) and
  // comes back.
  void pause();
  void resume();
  [[nodiscard]] bool running() const { return pid_ > 0; }
  // The server's process id, which leads its process group; -1 while stopped.
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] std::uint16_t port() const { return port_; }

 private:
  std::filesystem::path program_;
  std::vector<std::string> args_;
  std::filesystem::path log_;
  std::uint16_t port_;
  std::string ready_;
  pid_t pid_ = -1;
};

}  // namespace outbox::detail
