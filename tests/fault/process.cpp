#include "fault/process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace outbox::campaign {

Process::Process(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& environment,
                 const std::string& log_path) {
  // Everything the child needs is prepared before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos && environment.count(entry.substr(0, eq)) > 0) continue;
    env_strings.push_back(entry);
  }
  for (const auto& [key, value] : environment) env_strings.push_back(key + "=" + value);
  std::vector<char*> env_pointers;
  for (auto& s : env_strings) env_pointers.push_back(s.data());
  env_pointers.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers;
  for (auto& s : args) arg_pointers.push_back(s.data());
  arg_pointers.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open " + log_path + ": " + std::strerror(errno));

  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(log_fd);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the campaign, which stops its children
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and if the campaign itself dies, so do they
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(arg_pointers[0], arg_pointers.data(), env_pointers.data());
    ::_exit(127);
  }
  ::close(log_fd);
}

Process::Process(Process&& other) noexcept : pid_(other.pid_), status_(other.status_) {
  other.pid_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0) stop(std::chrono::milliseconds(0));
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = -1;
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0) stop(std::chrono::milliseconds(0));
}

bool Process::running() {
  if (pid_ <= 0) return false;
  const pid_t done = ::waitpid(pid_, &status_, WNOHANG);
  if (done == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void Process::signal(int signal_number) const {
  if (pid_ > 0) ::kill(pid_, signal_number);
}

bool Process::wait_for_exit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void Process::stop(std::chrono::milliseconds grace) {
  if (!running()) return;
  if (grace.count() > 0) {
    signal(SIGCONT);  // a stopped process cannot act on SIGTERM
    signal(SIGTERM);
    if (wait_for_exit(grace)) return;
  }
  signal(SIGKILL);
  ::waitpid(pid_, &status_, 0);
  pid_ = -1;
}

}  // namespace outbox::campaign
