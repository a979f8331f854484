#pragma once
// A private PostgreSQL cluster for the demo and the tests: initdb into a folder of its own, a unix
// socket in that folder, a free TCP port on 127.0.0.1, fsync on, a random superuser password that
// only this process's OS user can read (a libpq password file the connection string names),
// optionally TLS. Removed again on destruction.
// Should the owning process die without running destructors (SIGKILL, abort, a test timeout), a
// small watcher process it started stops the server and removes the folder (unless keep_data).

#include <filesystem>
#include <memory>
#include <string>

namespace outbox {

struct EmbeddedPostgresOptions {
  // Parent folder for the cluster's own folder; empty: $TMPDIR or /tmp.
  std::filesystem::path parent_dir;
  // Folder with initdb, pg_ctl and postgres; empty: $OUTBOX_PG_BINDIR, then `pg_config --bindir`,
  // then the highest /usr/lib/postgresql/*/bin.
  std::filesystem::path bin_dir;
  // OS user the server runs as when this process is root (initdb refuses root): empty picks
  // "postgres" when it exists, else "nobody".
  std::string run_as_user;
  bool keep_data = false;  // leave the folder in place on destruction (for post-mortems)
  int max_connections = 200;
  // PostgreSQL's buffer cache (a size such as "128MB" or "1GB"); memory is taken as it is used.
  // Tests keep the small default; the benchmark sizes it as a tuned server would be.
  std::string shared_buffers = "128MB";
  // TLS: a PEM certificate (chain) and its private key. When both are given the server turns ssl
  // on with them (copied into the cluster's folder, readable by the server alone), and clients
  // may connect with sslmode=verify-full against the CA that signed them.
  std::filesystem::path tls_certificate;
  std::filesystem::path tls_private_key;
};

// $OUTBOX_EMBEDDED_PG_CACHE (a folder; `make test` sets it in each build tree): the first cluster
// made with a given server and OS user keeps a copy of what initdb wrote there (and its
// superuser password, mode 0600); later ones start from a copy of it instead of running initdb,
// which saves about a second each (most of a test process's start). Unset: initdb every time.
//
// Thread safety: construct and destroy from one thread; the accessors are const and shareable.
class EmbeddedPostgres {
 public:
  // Runs initdb, starts the server and waits until it accepts connections; creates database
  // "outbox". Throws Error with the tool's output when any step fails. Blocks a few seconds.
  explicit EmbeddedPostgres(EmbeddedPostgresOptions options = {});
  // Stops the server (fast shutdown) and removes its folder unless keep_data.
  ~EmbeddedPostgres();
  EmbeddedPostgres(const EmbeddedPostgres&) = delete;
  EmbeddedPostgres& operator=(const EmbeddedPostgres&) = delete;

  // A libpq keyword/value connection string for database `database` over the unix socket.
  [[nodiscard]] std::string connection_string(const std::string& database = "outbox") const;
  [[nodiscard]] int port() const noexcept;
  [[nodiscard]] const std::filesystem::path& data_dir() const noexcept;
  [[nodiscard]] const std::filesystem::path& socket_dir() const noexcept;

  // Stops the server with "immediate" mode (a crash: no checkpoint) and starts it again on the
  // same folder and port; for recovery tests. Blocks until it accepts connections.
  void restart_immediate();
  // The two halves of restart_immediate, for outages that last a while: stop_immediate() crashes
  // the server, start_again() starts it on the same folder and port and waits until it accepts
  // connections.
  void stop_immediate();
  void start_again();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
