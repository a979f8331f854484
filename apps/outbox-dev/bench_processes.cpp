// `outbox-dev bench`: child processes, their output, their CPU time.

#include "bench_processes.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "outbox/error.hpp"

extern char** environ;

namespace outbox::cli::bench {
namespace {

using namespace std::chrono_literals;

// CPU seconds from a /proc/.../stat file (a process, or one thread under task/).
std::optional<double> cpu_seconds_in(const std::string& stat_path) {
  std::ifstream stat(stat_path);
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  const auto after_name = line.rfind(')');  // the command name may hold spaces
  if (after_name == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(after_name + 2));
  std::string field;
  long long utime = 0;
  long long stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15: utime, stime
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  if (!fields) return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// "FROM pg_stat_activity WHERE <the relays' sessions in this database>"
std::string relay_sessions() {
  return fmt::format(
      "FROM pg_stat_activity WHERE application_name = '{}' AND datname = current_database()",
      outbox::kRelayApplicationName);
}

}  // namespace

std::optional<double> cpu_seconds_of(pid_t pid) {
  return cpu_seconds_in("/proc/" + std::to_string(pid) + "/stat");
}

double broker_cpu_seconds(int server_group) {
  double total = 0;
  std::error_code error;
  if (server_group > 0) {
    for (const auto& process : std::filesystem::directory_iterator("/proc", error)) {
      const std::string name = process.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(process.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const auto after_name = line.rfind(')');
      std::istringstream fields(after_name == std::string::npos ? "" : line.substr(after_name + 2));
      std::string state;
      long long parent = 0;
      long long group = 0;
      if ((fields >> state >> parent >> group) && group == server_group) {
        total += cpu_seconds_in((process.path() / "stat").string()).value_or(0);
      }
    }
  }
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind("rdk:mock", 0) == 0) {
      total += cpu_seconds_in((task.path() / "stat").string()).value_or(0);
    }
  }
  return total;
}

Child::Child(const std::vector<std::string>& args, const std::string& log_path)
    : log_path_(log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // main() blocked SIGINT, SIGTERM and SIGHUP for its signal thread; a child starts without that.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  posix_spawnattr_setsigmask(&attributes, &no_signals);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  const int error = posix_spawn(&pid_, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    throw Error(fmt::format("bench: cannot start {}: {}", args[0], std::strerror(error)));
  }
}

Child::~Child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

// WNOWAIT: an exited child stays a zombie for stop() to reap with its rusage. (Reaping it here
// left stop() waiting for ever on a pid that was gone: a bench whose relays refused their flags
// never ended.)
bool Child::running() const {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

Child::End Child::stop() {
  ::kill(pid_, SIGTERM);
  End end;
  struct rusage usage {};
  const auto deadline = Clock::now() + 30s;
  for (;;) {
    const pid_t done = ::wait4(pid_, &end.status, WNOHANG, &usage);
    if (done == pid_ || (done < 0 && errno != EINTR)) break;  // reaped, or no such child
    if (Clock::now() > deadline) ::kill(pid_, SIGKILL);
    std::this_thread::sleep_for(20ms);
  }
  pid_ = -1;
  end.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                    static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  end.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  return end;
}

std::uint64_t RelayProcess::published() {
  std::ifstream log(log_path());
  log.seekg(log_offset_);
  std::string line;
  while (std::getline(log, line) && !log.eof()) {  // a line without '\n' yet is read next time
    log_offset_ += static_cast<std::streamoff>(line.size()) + 1;
    if (!line.starts_with('{')) continue;  // the log has the relay's warnings too
    nlohmann::json stats = nlohmann::json::parse(line, nullptr, false);
    if (stats.is_object() && stats.contains("published") && stats.contains("relay_id")) {
      published_[stats["relay_id"].get<std::string>()] = stats["published"].get<std::uint64_t>();
    }
  }
  std::uint64_t sum = 0;
  for (const auto& [relay, published] : published_) sum += published;
  return sum;
}

Paused::Paused(pid_t pid) : pid_(pid) { ::kill(pid_, SIGSTOP); }
Paused::~Paused() { ::kill(pid_, SIGCONT); }

bool relay_sessions_idle(PGconn* conn) {
  return pg::exec(conn, "SELECT count(*) " + relay_sessions() +
                            " AND backend_type <> 'walsender' AND state <> 'idle'")
             .int64(0, 0) == 0;
}

RelaySessionsCpu::RelaySessionsCpu(const Setup& setup)
    : setup_(setup), known_(setup.options.database_url.empty()) {
  sample();
}

void RelaySessionsCpu::sample() {
  if (!known_) return;
  auto c = setup_.connect();
  const auto found =
      pg::exec(c.get(), "SELECT pid, backend_type = 'walsender' " + relay_sessions());
  for (int row = 0; row < found.rows(); ++row) {
    const auto pid = static_cast<pid_t>(found.int64(row, 0));
    const std::optional<double> cpu = cpu_seconds_of(pid);
    if (!cpu) continue;  // ended meanwhile
    auto [at, added] = sessions_.try_emplace(pid);
    if (added) {
      at->second.walsender = found.text(row, 1) == "t";
      at->second.before = first_ ? *cpu : 0;
    }
    at->second.latest = *cpu;
  }
  first_ = false;
}

double RelaySessionsCpu::seconds() const {
  double total = 0;
  for (const auto& [pid, session] : sessions_) total += session.latest - session.before;
  return total;
}

double RelaySessionsCpu::walsender_seconds() const {
  double total = 0;
  for (const auto& [pid, session] : sessions_) {
    if (session.walsender) total += session.latest - session.before;
  }
  return total;
}

}  // namespace outbox::cli::bench
