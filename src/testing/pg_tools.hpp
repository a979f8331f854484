#pragma once
// Running PostgreSQL's programs (initdb, pg_ctl, pg_config) for the embedded cluster: started with
// fork + execv, never through a shell, and as an unprivileged user when this process is root,
// because initdb, pg_ctl and postgres refuse to run as root; and finding the folder that holds
// them.

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <ios>
#include <string>
#include <vector>

namespace outbox::detail {

constexpr std::size_t kOutputTailLines = 25;

// The OS user the tools run as. Not root: no switch, they run as ourselves.
struct OsUser {
  bool switch_user = false;
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // looked up before fork: initgroups is not async-signal-safe
};

struct ToolResult {
  int status = 0;      // exit code, or 128 + signal number
  std::string output;  // stdout and stderr interleaved
};

// Closes a file descriptor on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

// The file's content from `offset` on; empty when it cannot be read.
std::string read_file_from(const std::filesystem::path& path, std::streamoff offset = 0);

// The last `max_lines` lines of a program's output, for an error message.
std::string tail_lines(const std::string& text, std::size_t max_lines = kOutputTailLines);

// The OS user to run the tools as: ourselves unless we are root, then `requested` (empty:
// "postgres" when it exists, else "nobody"). Throws ConfigError when that user does not exist.
OsUser choose_os_user(const std::string& requested);

// Runs `program args...` as `user` in `work_dir`, waits for it, and returns its output (collected
// in a file rather than a pipe: pg_ctl leaves a daemon behind that must not hold our pipe open).
ToolResult run_tool(const OsUser& user, const std::filesystem::path& work_dir,
                    const std::filesystem::path& output_path, const std::filesystem::path& program,
                    const std::vector<std::string>& args);

// Chooses the folder with initdb/pg_ctl in the order documented in the public header; runs
// pg_config in `work_dir`, its output in `output_path`. Throws ConfigError when there is none.
std::filesystem::path find_bin_dir(const std::filesystem::path& configured,
                                   const std::filesystem::path& work_dir,
                                   const std::filesystem::path& output_path);

}  // namespace outbox::detail
