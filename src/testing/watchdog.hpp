#pragma once
// Watchdog: a process that dies without running destructors (SIGKILL, abort, a ctest timeout)
// would leave the server running and its folder behind. So a small watcher (/bin/sh running a
// fixed script; paths only as arguments) is started with the folder. It blocks reading a unix
// socket whose other end only this process holds (SOCK_CLOEXEC). End of file means we are gone;
// the watcher then runs `pg_ctl stop -m immediate` and removes the folder (unless keep_data). The
// destructor instead cleans up itself, then sends the watcher a line that dismisses it and waits
// for it to exit. A socket rather than polling `kill -0 <pid>`: it needs no permission to signal
// us (the watcher runs as the server's user when we are root), cannot be fooled by pid reuse and
// reacts at once. The watcher is a grandchild in a session of its own, not our child: ctest kills
// a timed-out test's whole tree of children (found by parent pid), and a terminal's Ctrl-C its
// process group.

#include <sys/types.h>

#include <filesystem>

#include "testing/pg_tools.hpp"

namespace outbox::detail {

// The watcher of one embedded cluster. Not thread-safe; move-less, one per cluster.
class Watchdog {
 public:
  Watchdog() = default;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the watcher of the cluster in `root_dir` (its server's data in `data_dir`, pg_ctl in
  // `bin_dir`), as `user`. Blocks until it reports (at most 10 s). Never throws: without a
  // watcher it logs a warning and the cluster goes on unwatched.
  void start(const OsUser& user, const std::filesystem::path& bin_dir,
             const std::filesystem::path& data_dir, const std::filesystem::path& root_dir,
             bool keep_data);
  // After an orderly cleanup: tells the watcher its job is done and waits until it has exited, so
  // that no stray process remains and nothing is stopped or removed twice.
  void dismiss() noexcept;

 private:
  int socket_ = -1;  // our end of the socket the watcher waits on; see start
  pid_t pid_ = -1;   // as the watcher reported it; not our child
};

}  // namespace outbox::detail
