// A throwaway PostgreSQL cluster (see outbox/testing/embedded_postgres.hpp). initdb, pg_ctl and
// pg_config are started with fork + execv, never through a shell, and as an unprivileged user when
// this process is root, because initdb, pg_ctl and postgres refuse to run as root.
//
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

#include "outbox/testing/embedded_postgres.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <regex>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "outbox/error.hpp"

namespace outbox {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxStartAttempts = 5;  // another process may grab our port between probe and bind
constexpr const char* kSuperuser = "postgres";
constexpr const char* kDatabaseName = "outbox";
constexpr const char* kCreateDatabaseSql = "CREATE DATABASE outbox";
constexpr std::size_t kOutputTailLines = 25;
// sun_path holds 108 bytes including the NUL; postgres appends "/.s.PGSQL.<port>.lock".
constexpr std::size_t kMaxSocketDirLength = 108 - 1 - (sizeof("/.s.PGSQL.65535.lock") - 1);

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

std::string read_file_from(const fs::path& path, std::streamoff offset = 0) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(offset);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string tail_lines(const std::string& text, std::size_t max_lines = kOutputTailLines) {
  std::size_t start = text.size();
  for (std::size_t lines = 0; start > 0 && lines <= max_lines; --start) {
    if (text[start - 1] == '\n') ++lines;
  }
  std::string tail = text.substr(start == 0 ? 0 : start + 1);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail.empty() ? "(no output)" : tail;
}

OsUser choose_os_user(const std::string& requested) {
  OsUser user;
  if (::geteuid() != 0) return user;
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  auto lookup = [&](const std::string& name) {
    return ::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) == 0 &&
           found != nullptr;
  };
  user.name = requested;
  if (user.name.empty()) user.name = lookup("postgres") ? "postgres" : "nobody";
  if (!lookup(user.name)) {
    throw ConfigError(fmt::format(
        "embedded PostgreSQL: OS user '{}' does not exist; initdb refuses to run as root, so set "
        "EmbeddedPostgresOptions::run_as_user to an existing unprivileged user",
        user.name));
  }
  user.switch_user = true;
  user.uid = entry.pw_uid;
  user.gid = entry.pw_gid;
  int count = 0;
  ::getgrouplist(user.name.c_str(), user.gid, nullptr, &count);  // asks for the count
  user.groups.resize(static_cast<std::size_t>(count));
  if (::getgrouplist(user.name.c_str(), user.gid, user.groups.data(), &count) < 0) count = 0;
  user.groups.resize(static_cast<std::size_t>(count));
  return user;
}

// Runs `program args...` as `user` in `work_dir`, waits for it, and returns its output (collected
// in a file rather than a pipe: pg_ctl leaves a daemon behind that must not hold our pipe open).
ToolResult run_tool(const OsUser& user, const fs::path& work_dir, const fs::path& output_path,
                    const fs::path& program, const std::vector<std::string>& args) {
  std::vector<std::string> arguments{program.string()};
  arguments.insert(arguments.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(arguments.size() + 1);
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const std::string as_user = user.switch_user ? " as OS user " + user.name : "";
  const std::string switch_failed = "cannot switch to OS user " + user.name + "\n";
  const std::string enter_failed = fmt::format(
      "cannot enter {}{}: is every parent folder traversable (chmod o+x) by that user?\n",
      work_dir.string(), as_user);
  const std::string exec_failed = "cannot execute " + program.string() + as_user + "\n";

  ScopedFd output(::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ScopedFd null_input(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (output.get() < 0 || null_input.get() < 0) {
    throw Error(fmt::format("embedded PostgreSQL: cannot open {}: {}", output_path.string(),
                            std::strerror(errno)));
  }
  const pid_t pid = ::fork();
  if (pid < 0)
    throw Error(fmt::format("embedded PostgreSQL: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    // Child of a possibly multi-threaded process: only async-signal-safe calls from here on,
    // everything above was prepared for that reason.
    auto fail = [](const std::string& message, int code) {
      [[maybe_unused]] const ssize_t ignored =
          ::write(STDERR_FILENO, message.data(), message.size());
      ::_exit(code);
    };
    sigset_t no_signals;
    sigemptyset(&no_signals);
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);  // a blocked mask would be inherited by exec
    ::dup2(null_input.get(), STDIN_FILENO);
    ::dup2(output.get(), STDOUT_FILENO);
    ::dup2(output.get(), STDERR_FILENO);
    if (user.switch_user && (::setgroups(user.groups.size(), user.groups.data()) != 0 ||
                             ::setgid(user.gid) != 0 || ::setuid(user.uid) != 0)) {
      fail(switch_failed, 126);
    }
    if (::chdir(work_dir.c_str()) != 0) fail(enter_failed, 126);
    ::close_range(3, ~0U, 0);  // the server must not inherit our sockets and files
    ::execv(argv[0], argv.data());
    fail(exec_failed, 127);
  }
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  ToolResult result;
  result.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  result.output = read_file_from(output_path);
  return result;
}

std::optional<fs::path> find_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string entries = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t begin = 0; begin <= entries.size();) {
    std::size_t end = entries.find(':', begin);
    if (end == std::string::npos) end = entries.size();
    fs::path candidate = fs::path(entries.substr(begin, end - begin)) / program;
    if (end > begin && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

bool holds_initdb(const fs::path& dir) {
  return !dir.empty() && ::access((dir / "initdb").c_str(), X_OK) == 0;
}

// Chooses the folder with initdb/pg_ctl in the order documented in the header.
fs::path find_bin_dir(const fs::path& configured, const fs::path& work_dir,
                      const fs::path& output_path) {
  auto checked = [](const fs::path& dir, const char* source) {
    if (!holds_initdb(dir)) {
      throw ConfigError(fmt::format("embedded PostgreSQL: {} = {} holds no executable initdb",
                                    source, dir.string()));
    }
    return dir;
  };
  if (!configured.empty()) return checked(configured, "EmbeddedPostgresOptions::bin_dir");
  if (const char* env = std::getenv("OUTBOX_PG_BINDIR"); env != nullptr && *env != '\0') {
    return checked(env, "$OUTBOX_PG_BINDIR");
  }
  if (auto pg_config = find_in_path("pg_config")) {
    ToolResult result = run_tool(OsUser{}, work_dir, output_path, *pg_config, {"--bindir"});
    while (!result.output.empty() &&
           std::isspace(static_cast<unsigned char>(result.output.back()))) {
      result.output.pop_back();
    }
    if (result.status == 0 && holds_initdb(result.output)) return result.output;
  }
  // Debian/Ubuntu install the server per major version; take the newest.
  fs::path best;
  double best_version = -1;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ignored)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const double version = std::strtod(name.c_str(), &end);
    if (end != name.c_str() && version > best_version && holds_initdb(entry.path() / "bin")) {
      best_version = version;
      best = entry.path() / "bin";
    }
  }
  if (!best.empty()) return best;
  throw ConfigError(
      "embedded PostgreSQL: no PostgreSQL server binaries (initdb) found; install postgresql-15 "
      "(apt-get install postgresql-15) or set $OUTBOX_PG_BINDIR / "
      "EmbeddedPostgresOptions::bin_dir");
}

// pg_ctl pastes the -o string and the data/log paths into a shell command line of its own.
void require_shell_safe(const fs::path& path) {
  for (const char c : path.string()) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && std::strchr("/._-+", c) == nullptr) {
      throw ConfigError(fmt::format(
          "embedded PostgreSQL: path '{}' contains '{}'; pg_ctl passes paths through a shell, so "
          "use a parent_dir (or $TMPDIR) made of letters, digits and / . _ - + only",
          path.string(), c));
    }
  }
}

int pick_free_port() {
  ScopedFd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  auto* generic = reinterpret_cast<sockaddr*>(&address);
  if (probe.get() < 0 || ::bind(probe.get(), generic, sizeof(address)) != 0 ||
      ::getsockname(probe.get(), generic, &length) != 0) {
    throw Error(fmt::format("embedded PostgreSQL: cannot find a free TCP port on 127.0.0.1: {}",
                            std::strerror(errno)),
                true);
  }
  return ntohs(address.sin_port);
}

// Quotes a conninfo value per libpq's rules when it needs quoting.
std::string conninfo_value(const std::string& value) {
  if (!value.empty() && value.find_first_of(" \t\n\r'\\") == std::string::npos) return value;
  std::string quoted = "'";
  for (const char c : value) {
    if (c == '\'' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "'";
}

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

// The forked child of start_watcher(): puts /dev/null on 0..2 and the watcher's end of the socket
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

class EmbeddedPostgres::Impl {
 public:
  explicit Impl(EmbeddedPostgresOptions options) : options_(std::move(options)) {}
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // The fallible part of construction; ~Impl undoes whatever of it succeeded.
  void start();
  void restart_immediate();
  void stop_immediate() { stop_server("immediate"); }
  void start_again() { start_server(/*may_change_port=*/false); }
  [[nodiscard]] std::string connection_string(const std::string& database) const {
    return fmt::format("host={} port={} user={} dbname={} passfile={}",
                       conninfo_value(socket_dir_.string()), port_, kSuperuser,
                       conninfo_value(database), conninfo_value(passfile_.string()));
  }
  [[nodiscard]] int port() const noexcept { return port_; }
  [[nodiscard]] const fs::path& data_dir() const noexcept { return data_dir_; }
  [[nodiscard]] const fs::path& socket_dir() const noexcept { return socket_dir_; }

 private:
  void make_folders();
  void write_password_files(const fs::path& initdb_pwfile, std::string password = {});
  void run_initdb();
  [[nodiscard]] fs::path cached_cluster() const;
  bool copy_cached_cluster(const fs::path& cached);
  void save_cached_cluster(const fs::path& cached) const;
  void configure_tls();
  void start_server(bool may_change_port);
  void stop_server(const char* mode);
  void create_database();
  void start_watcher();
  void dismiss_watcher() noexcept;
  void clean_up() noexcept;
  ToolResult run(const std::string& tool, const std::vector<std::string>& args) const {
    return run_tool(user_, root_dir_, root_dir_ / "tool-output.log", bin_dir_ / tool, args);
  }
  [[nodiscard]] std::string server_log_tail() const {
    return tail_lines(read_file_from(log_path_));
  }

  EmbeddedPostgresOptions options_;
  OsUser user_;
  fs::path bin_dir_;
  fs::path root_dir_;
  fs::path data_dir_;
  fs::path socket_dir_;
  fs::path log_path_;
  fs::path passfile_;  // libpq password file with the superuser's password; ours, mode 0600
  std::string password_;
  int port_ = 0;
  int watcher_socket_ = -1;  // our end of the socket the watcher waits on; see start_watcher
  pid_t watcher_pid_ = -1;   // as the watcher reported it; not our child
};

void EmbeddedPostgres::Impl::start() {
  // Checked before initdb. The options reach postgres through pg_ctl's shell: accept a plain
  // size and nothing else (PostgreSQL itself refuses sizes below 128kB).
  static const std::regex kSize("[0-9]+(kB|MB|GB|TB)");
  if (!std::regex_match(options_.shared_buffers, kSize)) {
    throw ConfigError("EmbeddedPostgresOptions::shared_buffers is \"" + options_.shared_buffers +
                      "\"; give a size with its unit, such as 128MB or 1GB");
  }
  user_ = choose_os_user(options_.run_as_user);
  make_folders();
  bin_dir_ = find_bin_dir(options_.bin_dir, root_dir_, root_dir_ / "tool-output.log");
  // Before initdb: from here on there is a folder (and soon a server) to clean up after a crash.
  // The watcher stops whatever server runs in data_dir_ then, so restart_immediate needs no new
  // one.
  start_watcher();
  run_initdb();
  configure_tls();
  start_server(/*may_change_port=*/true);
  create_database();
  detail::log().info("embedded PostgreSQL from {} listening on 127.0.0.1:{} and {} (folder {})",
                     bin_dir_.string(), port_, socket_dir_.string(), root_dir_.string());
}

void EmbeddedPostgres::Impl::make_folders() {
  fs::path parent = options_.parent_dir;
  if (parent.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    parent = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  }
  std::string pattern = (fs::absolute(parent) / "outbox-pg-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(fmt::format("embedded PostgreSQL: cannot create a folder {}: {}", pattern,
                            std::strerror(errno)));
  }
  root_dir_ = pattern;
  data_dir_ = root_dir_ / "data";
  socket_dir_ = root_dir_ / "sock";
  log_path_ = root_dir_ / "server.log";
  require_shell_safe(root_dir_);
  if (socket_dir_.string().size() > kMaxSocketDirLength) {
    throw ConfigError(fmt::format(
        "embedded PostgreSQL: socket folder {} is longer than the {} characters a unix socket "
        "path allows; use a shorter parent_dir or $TMPDIR",
        socket_dir_.string(), kMaxSocketDirLength));
  }
  passfile_ = root_dir_ / "pgpass";
  std::error_code error;
  if (!fs::create_directory(socket_dir_, error)) {
    throw Error(fmt::format("embedded PostgreSQL: cannot create {}: {}", socket_dir_.string(),
                            error.message()));
  }
  // Only the server's user (and root) may reach the socket; the folder itself is 0700 (mkdtemp).
  fs::permissions(socket_dir_, fs::perms::owner_all, error);
  if (user_.switch_user) {
    for (const fs::path& dir : {root_dir_, socket_dir_}) {
      if (::chown(dir.c_str(), user_.uid, user_.gid) != 0) {
        throw Error(fmt::format("embedded PostgreSQL: cannot chown {} to {}: {}", dir.string(),
                                user_.name, std::strerror(errno)));
      }
    }
  }
}

void EmbeddedPostgres::Impl::start_watcher() {
  std::vector<std::string> arguments{"/bin/sh",
                                     "-c",
                                     kWatcherScript,
                                     "outbox-pg-watchdog",  // $0: how it shows in ps
                                     fs::absolute(bin_dir_ / "pg_ctl").string(),
                                     data_dir_.string(),
                                     root_dir_.string(),
                                     options_.keep_data ? "keep" : "remove"};
  std::vector<char*> argv;
  argv.reserve(arguments.size() + 1);
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const int max_fd = open_file_limit();
  auto give_up = [this](const std::string& why) {
    detail::log().warn(
        "embedded PostgreSQL: no watchdog for {} ({}); should this process die without cleaning "
        "up, the server keeps running",
        root_dir_.string(), why);
    if (watcher_socket_ >= 0) ::close(watcher_socket_);
    watcher_socket_ = -1;
  };

  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return give_up(fmt::format("socketpair: {}", std::strerror(errno)));
  }
  watcher_socket_ = sockets[0];
  const int watcher_end = sockets[1];
  const int null_device = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = null_device < 0 ? -1 : ::fork();
  if (pid == 0) become_watcher(watcher_end, null_device, max_fd, user_, argv.data());
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
  const auto reported = read_line(watcher_socket_, kWatcherTimeout, &eof);
  if (!reported) {
    return give_up(eof ? fmt::format("it could not start /bin/sh{}",
                                     user_.switch_user ? " as OS user " + user_.name : "")
                       : "it did not report");
  }
  watcher_pid_ = static_cast<pid_t>(std::strtol(reported->c_str(), nullptr, 10));
}

// After an orderly cleanup: tells the watcher its job is done and waits until it has exited, so
// that no stray process remains and nothing is stopped or removed twice.
void EmbeddedPostgres::Impl::dismiss_watcher() noexcept {
  if (watcher_socket_ < 0) return;
  [[maybe_unused]] const ssize_t sent = ::send(watcher_socket_, "done\n", 5, MSG_NOSIGNAL);
  bool eof = false;
  while (read_line(watcher_socket_, kWatcherTimeout, &eof)) {  // nothing more is expected
  }
  // No end of file: it still holds its end of the socket, so it is alive and `watcher_pid_` is
  // still its pid (not reused).
  if (!eof && watcher_pid_ > 0) ::kill(watcher_pid_, SIGKILL);
  ::close(watcher_socket_);
  watcher_socket_ = -1;
}

// A random password for the superuser: with trust authentication any local OS user could log in
// over 127.0.0.1 as superuser and run programs as the server's user (COPY ... TO PROGRAM).
// initdb reads it from a file the server's user can read, removed right after; clients find it in
// a libpq password file (passfile=, in the connection string) that only this process's user can
// read, so it never stands in a connection string, a log or a process list.
// The superuser's password (random unless given): for initdb in `initdb_pwfile` (none when
// empty), and for our clients in passfile_.
void EmbeddedPostgres::Impl::write_password_files(const fs::path& initdb_pwfile,
                                                  std::string password) {
  if (password.empty()) {
    std::random_device random;
    for (int i = 0; i < 4; ++i) password += fmt::format("{:08x}", random());
  }
  password_ = std::move(password);
  auto write_private = [this](const fs::path& path, const std::string& content, bool for_server) {
    ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0 ||
        ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()) ||
        (for_server && user_.switch_user && ::fchown(fd.get(), user_.uid, user_.gid) != 0)) {
      throw Error(fmt::format("embedded PostgreSQL: cannot write {}: {}", path.string(),
                              std::strerror(errno)));
    }
  };
  if (!initdb_pwfile.empty()) write_private(initdb_pwfile, password_ + "\n", /*for_server=*/true);
  write_private(passfile_, fmt::format("*:*:*:{}:{}\n", kSuperuser, password_),
                /*for_server=*/false);
}

void EmbeddedPostgres::Impl::run_initdb() {
  const fs::path cached = cached_cluster();
  if (!cached.empty() && copy_cached_cluster(cached)) return;
  const fs::path pwfile = root_dir_ / "initdb-password";
  write_password_files(pwfile);
  std::vector<std::string> args{"-D",
                                data_dir_.string(),
                                "-U",
                                kSuperuser,
                                "--auth=scram-sha-256",
                                "--pwfile=" + pwfile.string(),
                                "-E",
                                "UTF8",
                                "--no-sync",
                                "--locale=C.UTF-8"};
  ToolResult result = run("initdb", args);
  if (result.status != 0 && result.output.find("locale") != std::string::npos) {
    // Minimal systems lack C.UTF-8; the tests only need UTF8 encoding, not a locale.
    detail::log().warn(
        "embedded PostgreSQL: initdb with locale C.UTF-8 failed, retrying --no-locale");
    args.back() = "--no-locale";
    result = run("initdb", args);
  }
  std::error_code ignored;
  fs::remove(pwfile, ignored);
  if (result.status != 0) {
    throw Error(fmt::format("embedded PostgreSQL: initdb in {} failed (exit {}):\n{}",
                            data_dir_.string(), result.status, tail_lines(result.output)));
  }
  if (!cached.empty()) save_cached_cluster(cached);
}

// $OUTBOX_EMBEDDED_PG_CACHE/cluster-<key>: one per server binary (its folder, size and time, so
// an upgrade in place makes a new one) and OS user, and version of the initdb arguments above
// (bump kCacheFormat when they change). Empty: no cache.
fs::path EmbeddedPostgres::Impl::cached_cluster() const {
  constexpr std::string_view kCacheFormat = "1";
  const char* cache = std::getenv("OUTBOX_EMBEDDED_PG_CACHE");
  if (cache == nullptr || *cache == '\0') return {};
  struct stat server {};
  if (::stat((bin_dir_ / "postgres").c_str(), &server) != 0) return {};
  const std::size_t key =
      std::hash<std::string>{}(fmt::format("{}|{}|{}|{}|{}", bin_dir_.string(), server.st_size,
                                           server.st_mtime, user_.uid, kCacheFormat));
  return fs::absolute(cache) / fmt::format("cluster-{:016x}", key);
}

// A copy of the cached cluster in data_dir_, owned by the server's user, with its password.
// False (and nothing left behind) when there is none or it cannot be copied: initdb then.
bool EmbeddedPostgres::Impl::copy_cached_cluster(const fs::path& cached) {
  // Only a cluster this user made and nobody else can change: another local user's could carry
  // settings (an archive_command) that run commands as the server's user.
  struct stat entry {};
  if (::lstat(cached.c_str(), &entry) != 0 || !S_ISDIR(entry.st_mode) ||
      entry.st_uid != ::geteuid() || (entry.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return false;
  }
  std::error_code error;
  const std::string password = read_file_from(cached / "password");
  if (password.empty() || !fs::exists(cached / "data" / "PG_VERSION", error)) return false;
  fs::copy(cached / "data", data_dir_, fs::copy_options::recursive, error);
  if (!error && user_.switch_user) {
    for (auto it = fs::recursive_directory_iterator(data_dir_, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      if (::lchown(it->path().c_str(), user_.uid, user_.gid) != 0) {
        error = std::error_code(errno, std::generic_category());
      }
    }
    if (!error && ::chown(data_dir_.c_str(), user_.uid, user_.gid) != 0) {
      error = std::error_code(errno, std::generic_category());
    }
  }
  if (error) {
    detail::log().warn(
        "embedded PostgreSQL: cannot copy the cached cluster {} ({}); running initdb",
        cached.string(), error.message());
    std::error_code ignored;
    fs::remove_all(data_dir_, ignored);
    return false;
  }
  write_password_files({}, password);
  return true;
}

// Keeps what initdb wrote (before the server ever ran) for the next cluster: copied aside, then
// renamed into place, so a concurrent reader sees all of it or none. Best effort: a failure
// costs the next cluster its initdb, nothing else.
void EmbeddedPostgres::Impl::save_cached_cluster(const fs::path& cached) const {
  std::error_code error;
  if (fs::exists(cached, error)) return;
  // Restricted only when made here: a folder the user named (even /tmp) keeps its modes.
  if (fs::create_directories(cached.parent_path(), error)) {
    fs::permissions(cached.parent_path(), fs::perms::owner_all, error);
  }
  const fs::path staging =
      cached.parent_path() / fmt::format("{}.{}.tmp", cached.filename().string(), ::getpid());
  fs::remove_all(staging, error);
  fs::create_directory(staging, error);
  fs::permissions(staging, fs::perms::owner_all, error);
  if (!error) fs::copy(data_dir_, staging / "data", fs::copy_options::recursive, error);
  if (!error) {
    ScopedFd fd(
        ::open((staging / "password").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0 || ::write(fd.get(), password_.data(), password_.size()) !=
                            static_cast<ssize_t>(password_.size())) {
      error = std::error_code(errno, std::generic_category());
    }
  }
  if (!error) fs::rename(staging, cached, error);  // fails when another saved it first
  if (error) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
  }
}

// The certificate and key go into the data folder, owned by the server's user, the key 0600
// (PostgreSQL refuses a key others can read); postgresql.conf names them (settings in the file,
// not on pg_ctl's shell command line).
void EmbeddedPostgres::Impl::configure_tls() {
  if (options_.tls_certificate.empty() && options_.tls_private_key.empty()) return;
  if (options_.tls_certificate.empty() || options_.tls_private_key.empty()) {
    throw ConfigError("embedded PostgreSQL: TLS needs both tls_certificate and tls_private_key");
  }
  auto copy_private = [this](const fs::path& from, const char* name) {
    const std::string content = read_file_from(from);
    if (content.empty()) {
      throw ConfigError(
          fmt::format("embedded PostgreSQL: cannot read {} (or it is empty)", from.string()));
    }
    const fs::path to = data_dir_ / name;
    ScopedFd fd(::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0 ||
        ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()) ||
        (user_.switch_user && ::fchown(fd.get(), user_.uid, user_.gid) != 0)) {
      throw Error(fmt::format("embedded PostgreSQL: cannot write {}: {}", to.string(),
                              std::strerror(errno)));
    }
  };
  copy_private(options_.tls_certificate, "server.crt");
  copy_private(options_.tls_private_key, "server.key");
  std::ofstream conf(data_dir_ / "postgresql.conf", std::ios::app);
  conf << "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n";
  if (!conf) {
    throw Error("embedded PostgreSQL: cannot append the TLS settings to postgresql.conf");
  }
}

void EmbeddedPostgres::Impl::start_server(bool may_change_port) {
  for (int attempt = 1;; ++attempt) {
    if (may_change_port) port_ = pick_free_port();
    const std::string server_options = fmt::format(
        "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} "
        "-c unix_socket_permissions=0700 -c fsync=on "
        "-c synchronous_commit=on -c max_connections={} -c shared_buffers={} "
        "-c wal_level=logical -c max_wal_senders=10 -c max_replication_slots=10 "
        "-c logging_collector=off",
        port_, socket_dir_.string(), options_.max_connections, options_.shared_buffers);
    std::error_code no_log_yet;
    const auto log_size = fs::file_size(log_path_, no_log_yet);
    const std::streamoff log_offset = no_log_yet ? 0 : static_cast<std::streamoff>(log_size);
    // pg_ctl puts the postmaster in a session of its own (setsid), so a Ctrl-C aimed at the test
    // does not take the server down before the destructor's orderly stop.
    const ToolResult result = run("pg_ctl", {"-D", data_dir_.string(), "-l", log_path_.string(),
                                             "-w", "-t", "60", "-o", server_options, "start"});
    if (result.status == 0) return;
    const std::string log_part = read_file_from(log_path_, log_offset);
    const bool port_taken = log_part.find("already in use") != std::string::npos;
    if (!port_taken || !may_change_port || attempt == kMaxStartAttempts) {
      throw Error(fmt::format("embedded PostgreSQL: pg_ctl start on port {} failed (exit "
                              "{}):\n{}\nserver log {}:\n{}",
                              port_, result.status, tail_lines(result.output), log_path_.string(),
                              tail_lines(log_part)),
                  port_taken);
    }
    detail::log().warn(
        "embedded PostgreSQL: port {} was taken before the server bound it; retrying", port_);
  }
}

void EmbeddedPostgres::Impl::stop_server(const char* mode) {
  const ToolResult result =
      run("pg_ctl", {"-D", data_dir_.string(), "-m", mode, "-w", "-t", "60", "stop"});
  if (result.status != 0) {
    throw Error(fmt::format(
        "embedded PostgreSQL: pg_ctl stop -m {} failed (exit {}):\n{}\n"
        "server log {}:\n{}",
        mode, result.status, tail_lines(result.output), log_path_.string(), server_log_tail()));
  }
}

void EmbeddedPostgres::Impl::create_database() {
  const std::unique_ptr<PGconn, decltype(&PQfinish)> connection(
      PQconnectdb(connection_string("postgres").c_str()), &PQfinish);
  if (connection == nullptr || PQstatus(connection.get()) != CONNECTION_OK) {
    throw Error(
        fmt::format("embedded PostgreSQL: cannot connect to create database {}: {}\n"
                    "server log {}:\n{}",
                    kDatabaseName, connection ? PQerrorMessage(connection.get()) : "out of memory",
                    log_path_.string(), server_log_tail()));
  }
  const std::unique_ptr<PGresult, decltype(&PQclear)> result(
      PQexec(connection.get(), kCreateDatabaseSql), &PQclear);
  if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
    const char* sqlstate = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
    throw DatabaseError(fmt::format("embedded PostgreSQL: {} failed: {}", kCreateDatabaseSql,
                                    PQerrorMessage(connection.get())),
                        sqlstate != nullptr ? sqlstate : "", false);
  }
}

void EmbeddedPostgres::Impl::restart_immediate() {
  stop_server("immediate");
  start_server(/*may_change_port=*/false);
}

EmbeddedPostgres::Impl::~Impl() {
  clean_up();
  dismiss_watcher();  // after clean_up: should we die during it, the watcher finishes the job
}

void EmbeddedPostgres::Impl::clean_up() noexcept {
  try {
    try {
      // postmaster.pid exists while a server may run, also after a failed or timed-out start.
      if (!data_dir_.empty() && fs::exists(data_dir_ / "postmaster.pid")) {
        try {
          stop_server("fast");
        } catch (const std::exception& error) {
          detail::log().warn("{}; trying immediate shutdown", error.what());
          stop_server("immediate");
        }
      }
    } catch (const std::exception& error) {
      detail::log().error("embedded PostgreSQL: could not stop the server in {}: {}",
                          root_dir_.string(), error.what());
    }
    if (root_dir_.empty()) return;
    if (options_.keep_data) {
      detail::log().info("embedded PostgreSQL: keeping {} (keep_data)", root_dir_.string());
      return;
    }
    std::error_code error;
    fs::remove_all(root_dir_, error);
    if (error) {
      detail::log().error("embedded PostgreSQL: could not remove {}: {}", root_dir_.string(),
                          error.message());
    }
  } catch (...) {  // a destructor must not throw; logging itself failed, nothing left to do
  }
}

// Members are destroyed when a constructor body throws, so ~Impl cleans up a half-started cluster.
EmbeddedPostgres::EmbeddedPostgres(EmbeddedPostgresOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->start();
}

EmbeddedPostgres::~EmbeddedPostgres() = default;

std::string EmbeddedPostgres::connection_string(const std::string& database) const {
  return impl_->connection_string(database);
}
int EmbeddedPostgres::port() const noexcept { return impl_->port(); }
const std::filesystem::path& EmbeddedPostgres::data_dir() const noexcept {
  return impl_->data_dir();
}
const std::filesystem::path& EmbeddedPostgres::socket_dir() const noexcept {
  return impl_->socket_dir();
}
void EmbeddedPostgres::restart_immediate() { impl_->restart_immediate(); }
void EmbeddedPostgres::stop_immediate() { impl_->stop_immediate(); }
void EmbeddedPostgres::start_again() { impl_->start_again(); }

}  // namespace outbox
