// A throwaway PostgreSQL cluster (see outbox/testing/embedded_postgres.hpp): its folders, initdb
// (or a copy of a cached cluster: cluster_cache.hpp), the superuser's password, TLS, pg_ctl start
// and stop, and the database the tests use. The programs run as pg_tools.hpp says; a watcher
// cleans up after a process that dies without running destructors (watchdog.hpp).

#include "outbox/testing/embedded_postgres.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "outbox/error.hpp"
#include "testing/cluster_cache.hpp"
#include "testing/pg_tools.hpp"
#include "testing/watchdog.hpp"

namespace outbox {
namespace {

namespace fs = std::filesystem;
using detail::OsUser;
using detail::read_file_from;
using detail::ScopedFd;
using detail::tail_lines;
using detail::ToolResult;

constexpr int kMaxStartAttempts = 5;  // another process may grab our port between probe and bind
constexpr const char* kSuperuser = "postgres";
constexpr const char* kDatabaseName = "outbox";
constexpr const char* kCreateDatabaseSql = "CREATE DATABASE outbox";
// sun_path holds 108 bytes including the NUL; postgres appends "/.s.PGSQL.<port>.lock".
constexpr std::size_t kMaxSocketDirLength = 108 - 1 - (sizeof("/.s.PGSQL.65535.lock") - 1);

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
  void configure_tls();
  void start_server(bool may_change_port);
  void stop_server(const char* mode);
  void create_database();
  void clean_up() noexcept;
  ToolResult run(const std::string& tool, const std::vector<std::string>& args) const {
    return detail::run_tool(user_, root_dir_, root_dir_ / "tool-output.log", bin_dir_ / tool, args);
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
  detail::Watchdog watchdog_;
};

void EmbeddedPostgres::Impl::start() {
  // Checked before initdb. The options reach postgres through pg_ctl's shell: accept a plain
  // size and nothing else (PostgreSQL itself refuses sizes below 128kB).
  static const std::regex kSize("[0-9]+(kB|MB|GB|TB)");
  if (!std::regex_match(options_.shared_buffers, kSize)) {
    throw ConfigError("EmbeddedPostgresOptions::shared_buffers is \"" + options_.shared_buffers +
                      "\"; give a size with its unit, such as 128MB or 1GB");
  }
  user_ = detail::choose_os_user(options_.run_as_user);
  make_folders();
  bin_dir_ = detail::find_bin_dir(options_.bin_dir, root_dir_, root_dir_ / "tool-output.log");
  // Before initdb: from here on there is a folder (and soon a server) to clean up after a crash.
  // The watcher stops whatever server runs in data_dir_ then, so restart_immediate needs no new
  // one.
  watchdog_.start(user_, bin_dir_, data_dir_, root_dir_, options_.keep_data);
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
  const fs::path cached = detail::cached_cluster(bin_dir_, user_);
  if (!cached.empty()) {
    if (auto password = detail::copy_cached_cluster(cached, data_dir_, user_)) {
      write_password_files({}, std::move(*password));
      return;
    }
  }
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
  if (!cached.empty()) detail::save_cached_cluster(cached, data_dir_, password_);
}

// $OUTBOX_EMBEDDED_PG_CACHE/cluster-<key>: one per server binary (its folder, size and time, so
// an upgrade in place makes a new one) and OS user, and version of the initdb arguments above
// (bump kCacheFormat when they change). Empty: no cache.
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
  watchdog_.dismiss();  // after clean_up: should we die during it, the watcher finishes the job
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
