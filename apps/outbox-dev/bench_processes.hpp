#pragma once
// `outbox-dev bench`: child processes (relays run as `outbox relay`, so their CPU time and peak RSS
// are their own), what they print, and what they and their PostgreSQL sessions cost in CPU.

#include <sys/types.h>

#include <cstdint>
#include <ios>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench.hpp"

namespace outbox::cli::bench {

// CPU seconds (user + system) a local process has used so far; nullopt if it cannot be read.
std::optional<double> cpu_seconds_of(pid_t pid);

// CPU seconds of the embedded broker: the Kafka mock cluster's threads in this process
// (librdkafka names them "rdk:mock"), and every process of `server_group` (an embedded
// nats-server, rabbitmq-server or redis-server; 0: none).
double broker_cpu_seconds(int server_group);

// A child process with stdout and stderr in `log_path`; killed if still running when destroyed.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& log_path);
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& log_path() const { return log_path_; }
  [[nodiscard]] bool running() const;

  struct End {
    int status = 0;
    double cpu_seconds = 0;
    double peak_rss_mib = 0;
  };
  // SIGTERM (a relay drains and exits), SIGKILL after 30 s; returns what the kernel measured.
  End stop();

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// A relay child (Setup::relay_args): reads the JSON stats lines it prints.
class RelayProcess : public Child {
 public:
  using Child::Child;

  // Its latest "published" count (0 before the first stats line), summed over the relays the
  // process runs (one per shard with --shards). Reads only what the log gained since the last
  // call (whole lines), not the whole log every time.
  std::uint64_t published();

 private:
  std::streamoff log_offset_ = 0;
  std::map<std::string, std::uint64_t> published_;  // by relay_id
};

// Stops a process (SIGSTOP) for this object's lifetime; it resumes however the scope ends.
class Paused {
 public:
  explicit Paused(pid_t pid);
  ~Paused();
  Paused(const Paused&) = delete;
  Paused& operator=(const Paused&) = delete;

 private:
  pid_t pid_;
};

// Whether the relays' PostgreSQL sessions (by application name, in the benchmark's database;
// not a CDC relay's walsender, which streams) are all idle.
bool relay_sessions_idle(PGconn* conn);

// CPU seconds the relays' PostgreSQL sessions used since this object was made: their backends
// and a CDC relay's walsender (both run with kRelayApplicationName). A session's process is gone
// once it ends, so each is read at every sample(); one that started and ended between two samples
// is missed. Embedded database only (a server elsewhere has its own process ids): otherwise
// known() is false.
class RelaySessionsCpu {
 public:
  explicit RelaySessionsCpu(const Setup& setup);
  void sample();
  [[nodiscard]] bool known() const { return known_; }
  [[nodiscard]] double seconds() const;            // all sessions
  [[nodiscard]] double walsender_seconds() const;  // of those, the walsenders

 private:
  struct Session {
    bool walsender = false;
    double before = 0;  // at the first sample that saw it (0 when it started after the first)
    double latest = 0;
  };
  const Setup& setup_;
  bool known_;
  bool first_ = true;
  std::map<pid_t, Session> sessions_;
};

}  // namespace outbox::cli::bench
