// See watchdog.hpp.

#include "testing/watchdog.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"

namespace outbox::detail {
namespace {

namespace fs = std::filesystem;

// The script the watcher runs: $1 pg_ctl, $2 data folder, $3 cluster folder, $4 "keep" or
// "remove"; fd 3 is its end of the socket. It reports its pid, then waits: a line means the owner
// cleaned up itself and dismisses it; end of file means every copy of the owner's end is closed,
// i.e. the owner has exited (or exec'd), and so has any un-exec'd fork of it. The cleanup steps
// tolerate that the destructor already stopped the server or removed the folder.
constexpr const char* kWatcherScript =
    "trap '' PIPE\n"
    "echo \"$$\" >&3\n"
    "if read -r _ <&3; then exit 0; fi\n"
    "exec 3<&-\n"
    "\"$1\" -D \"$2\" -m immediate -w -t 60 stop\n"
    "[ \"$4\" = keep ] || command -p rm -rf -- \"$3\"\n";
constexpr std::chrono::seconds kWatcherTimeout{10};

// Reads from `fd` until a newline (returns the text before it) or end of file, an error or the
// timeout (returns nullopt; `eof` tells end of file apart).
std::optional<std::string> read_line(int fd, std::chrono::milliseconds timeout, bool* eof) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  *eof = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd entry{fd, POLLIN, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    char buffer[64];
    const ssize_t count = ::recv(fd, buffer, sizeof(buffer), 0);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) {
      *eof = count == 0;
      return std::nullopt;
    }
    line.append(buffer, static_cast<std::size_t>(count));
    if (const auto newline = line.find('\n'); newline != std::string::npos) {
      return line.substr(0, newline);
    }
  }
}

// The highest file descriptor worth closing one by one, where close_range is missing.
int open_file_limit() {
  rlimit open_files{};
  return ::getrlimit(RLIMIT_NOFILE, &open_files) == 0 && open_files.rlim_cur != RLIM_INFINITY &&
                 open_files.rlim_cur < 65536
             ? static_cast<int>(open_files.rlim_cur)
             : 65536;
}

// The forked child of Watchdog::start(): puts /dev/null on 0..2 and the watcher's end of the socket
// on 3, closes everything else, leaves the session, forks again (init adopts the grandchild),
// becomes the server's OS user and runs the watcher script. The child of a possibly
// multi-threaded process: only async-signal-safe calls until execv.
[[noreturn]] void become_watcher(int watcher_end, int null_device, int max_fd, const OsUser& user,
                                 char* const* argv) {
  sigset_t no_signals;
  sigemptyset(&no_signals);
  sigprocmask(SIG_SETMASK, &no_signals, nullptr);
  // Out of the way of 0..3 first (socketpair/open return a low fd when one of those is closed).
  const int socket_fd = ::fcntl(watcher_end, F_DUPFD, 10);
  const int null_fd = ::fcntl(null_device, F_DUPFD, 10);
  // stdin/stdout/stderr on /dev/null: never hold the owner's (ctest's) pipes open.
  if (socket_fd < 0 || null_fd < 0 || ::dup2(null_fd, STDIN_FILENO) < 0 ||
      ::dup2(null_fd, STDOUT_FILENO) < 0 || ::dup2(null_fd, STDERR_FILENO) < 0 ||
      ::dup2(socket_fd, 3) < 0) {
    ::_exit(125);
  }
  // Nothing else, in particular not the owner's end of the socket: we would wait for ourselves.
  if (::close_range(4, ~0U, 0) != 0) {
    for (int fd = 4; fd < max_fd; ++fd) ::close(fd);
  }
  ::setsid();  // a Ctrl-C or hangup that kills the owner must not reach the watcher
  if (::chdir("/") != 0) ::_exit(125);
  const pid_t watcher = ::fork();  // this child exits at once: init adopts the watcher
  if (watcher != 0) ::_exit(watcher < 0 ? 125 : 0);
  if (user.switch_user && (::setgroups(user.groups.size(), user.groups.data()) != 0 ||
                           ::setgid(user.gid) != 0 || ::setuid(user.uid) != 0)) {
    ::_exit(126);
  }
  ::execv(argv[0], argv);
  ::_exit(127);
}

}  // namespace

void Watchdog::start(const OsUser& user, const fs::path& bin_dir, const fs::path& data_dir,
                     const fs::path& root_dir, bool keep_data) {
  std::vector<std::string> arguments{"/bin/sh",
                                     "-c",
                                     kWatcherScript,
                                     "outbox-pg-watchdog",  // $0: how it shows in ps
                                     fs::absolute(bin_dir / "pg_ctl").string(),
                                     data_dir.string(),
                                     root_dir.string(),
                                     keep_data ? "keep" : "remove"};
  std::vector<char*> argv;
  argv.reserve(arguments.size() + 1);
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const int max_fd = open_file_limit();
  auto give_up = [this, &root_dir](const std::string& why) {
    detail::log().warn(
        "embedded PostgreSQL: no watchdog for {} ({}); should this process die without cleaning "
        "up, the server keeps running",
        root_dir.string(), why);
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
  };

  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return give_up(fmt::format("socketpair: {}", std::strerror(errno)));
  }
  socket_ = sockets[0];
  const int watcher_end = sockets[1];
  const int null_device = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = null_device < 0 ? -1 : ::fork();
  if (pid == 0) become_watcher(watcher_end, null_device, max_fd, user, argv.data());
  const int fork_error = errno;  // of open or fork, when pid < 0
  ::close(watcher_end);          // now only the watcher holds it: its exit shows as end of file
  if (null_device >= 0) ::close(null_device);
  if (pid < 0) return give_up(std::strerror(fork_error));
  int status = 0;
  pid_t waited = 0;
  while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    return give_up("its setup failed");
  }
  bool eof = false;
  const auto reported = read_line(socket_, kWatcherTimeout, &eof);
  if (!reported) {
    return give_up(eof ? fmt::format("it could not start /bin/sh{}",
                                     user.switch_user ? " as OS user " + user.name : "")
                       : "it did not report");
  }
  pid_ = static_cast<pid_t>(std::strtol(reported->c_str(), nullptr, 10));
}

void Watchdog::dismiss() noexcept {
  if (socket_ < 0) return;
  [[maybe_unused]] const ssize_t sent = ::send(socket_, "done\n", 5, MSG_NOSIGNAL);
  bool eof = false;
  while (read_line(socket_, kWatcherTimeout, &eof)) {  // nothing more is expected
  }
  // No end of file: it still holds its end of the socket, so it is alive and `pid_` is
  // still its pid (not reused).
  if (!eof && pid_ > 0) ::kill(pid_, SIGKILL);
  ::close(socket_);
  socket_ = -1;
}

}  // namespace outbox::detail
