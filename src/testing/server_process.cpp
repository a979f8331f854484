#include "testing/server_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "outbox/error.hpp"
#include "testing/pg_tools.hpp"

namespace outbox::detail {
namespace {

using Clock = std::chrono::steady_clock;

bool accepts(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ScopedFd closer(fd);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

}  // namespace

std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw ConfigError("cannot open a socket to find a free port");
  const ScopedFd closer(fd);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    throw ConfigError("cannot find a free port on 127.0.0.1");
  }
  return ntohs(address.sin_port);
}

std::filesystem::path find_program(const std::string& name, const char* env,
                                   const std::vector<std::filesystem::path>& paths,
                                   const std::string& package) {
  if (const char* given = std::getenv(env); given != nullptr && *given != '\0') return given;
  for (const auto& path : paths) {
    if (std::filesystem::exists(path)) return path;
  }
  if (const char* path_env = std::getenv("PATH"); path_env != nullptr) {
    std::string all = path_env;
    for (std::size_t start = 0; start <= all.size();) {
      const std::size_t colon = std::min(all.find(':', start), all.size());
      const std::filesystem::path candidate =
          std::filesystem::path(all.substr(start, colon - start)) / name;
      if (colon > start && std::filesystem::exists(candidate)) return candidate;
      start = colon + 1;
    }
  }
  throw ConfigError(name + " not found: install Debian's " + package + " (apt-get install " +
                    package + ") or set " + env + " to its path");
}

ServerProcess::ServerProcess(std::filesystem::path program, std::vector<std::string> args,
                             std::filesystem::path log, std::uint16_t port, std::string ready)
    : program_(std::move(program)),
      args_(std::move(args)),
      log_(std::move(log)),
      port_(port),
      ready_(std::move(ready)) {}

ServerProcess::~ServerProcess() { stop(); }

void ServerProcess::start(std::chrono::milliseconds limit) {
  if (pid_ > 0) return;
  std::vector<std::string> argv_text{program_.string()};
  argv_text.insert(argv_text.end(), args_.begin(), args_.end());
  std::vector<char*> argv;
  for (auto& arg : argv_text) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) throw ConfigError("cannot open " + log_.string());
  const ScopedFd closer(out);
  const auto offset = std::filesystem::file_size(log_);
  const pid_t pid = ::fork();
  if (pid < 0) throw ConfigError("fork failed starting " + program_.string());
  if (pid == 0) {
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::setpgid(0, 0);  // a terminal's ^C goes to the tests, which stop it in order
    // outbox-dev blocks TERM, INT and HUP for its signal thread; exec keeps a blocked mask, and
    // the server would ignore stop()'s SIGTERM until the SIGKILL after it.
    sigset_t no_signals;
    sigemptyset(&no_signals);
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw ConfigError(program_.filename().string() + " exited at start; its log ends:\n" +
                        tail_lines(read_file_from(log_, static_cast<std::streamoff>(offset))));
    }
    // A RabbitMQ node listens before it has finished booting: a quorum queue declared then can
    // stay without a leader.
    if (accepts(port_) &&
        (ready_.empty() || read_file_from(log_, static_cast<std::streamoff>(offset)).find(ready_) !=
                               std::string::npos)) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop(true);
  throw ConfigError(program_.filename().string() + " did not listen on 127.0.0.1:" +
                    std::to_string(port_) + " in time; its log ends:\n" +
                    tail_lines(read_file_from(log_, static_cast<std::streamoff>(offset))));
}

void ServerProcess::pause() {
  if (pid_ > 0) ::kill(-pid_, SIGSTOP);
}

void ServerProcess::resume() {
  if (pid_ > 0) ::kill(-pid_, SIGCONT);
}

void ServerProcess::stop(bool kill) {
  if (pid_ <= 0) return;
  // The whole process group (the child made it its own): a server started through a script
  // (rabbitmq-server runs an Erlang node under a shell) stops with everything under it.
  ::kill(-pid_, SIGCONT);  // a paused server would not act on SIGTERM
  if (::kill(-pid_, kill ? SIGKILL : SIGTERM) != 0) ::kill(pid_, kill ? SIGKILL : SIGTERM);
  const auto until = Clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > until) {
      if (::kill(-pid_, SIGKILL) != 0) ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
}

}  // namespace outbox::detail
