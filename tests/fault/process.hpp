#pragma once
// Child processes for the crash campaign: spawn with extra environment, signal, reap.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace outbox::campaign {

class Process {
 public:
  Process() = default;
  // Starts `argv` with `environment` added to ours; stdout and stderr go to `log_path`
  // (appended). Throws std::runtime_error when fork/exec fails.
  Process(const std::vector<std::string>& argv,
          const std::map<std::string, std::string>& environment, const std::string& log_path);
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // SIGKILLs and reaps a child still running

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] bool running();
  void signal(int signal_number) const;
  // Waits up to `timeout` for the child to end; returns true when it did.
  bool wait_for_exit(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`.
  void stop(std::chrono::milliseconds grace);
  // The wait status once the child ended (see waitpid).
  [[nodiscard]] int status() const noexcept { return status_; }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
};

}  // namespace outbox::campaign
