// See pg_tools.hpp.

#include "testing/pg_tools.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include "outbox/error.hpp"

namespace outbox::detail {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

std::string read_file_from(const fs::path& path, std::streamoff offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(offset);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string tail_lines(const std::string& text, std::size_t max_lines) {
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

}  // namespace outbox::detail
