#pragma once
// An owned connection to PostgreSQL, for the library's functions that take a PGconn* (migrate,
// read_status, quarantine, replay, cleanup, the producer): connected the way the relay connects
// (keepalives, a connect timeout, the application name), with errors that never print a password.

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

class Connection {
 public:
  // A connection setting that wins over the connection string's own (the CDC stream's
  // replication=database).
  struct Setting {
    std::string keyword;
    std::string value;
  };

  // Connects (blocking) to a libpq connection string or URI; "" uses the PG* variables.
  // `overrides` are passed after the string (PQconnectdbParams with expand_dbname: later keywords
  // win), so they hold also when the string is a URI or sets them itself.
  // Throws DatabaseError, retryable for an outage (it says which server it could not reach), not
  // retryable for a refusal no retry fixes (SQLSTATE 28P01, 28000, 3D000, 42501, 08001).
  static Connection open(const std::string& database_url,
                         std::string_view application_name = "outbox",
                         const std::vector<Setting>& overrides = {});

  [[nodiscard]] PGconn* get() const noexcept { return handle_.get(); }
  [[nodiscard]] bool healthy() const noexcept;

  // Runs one statement without parameters (a SET, a LISTEN) and drops what it returns. Throws
  // DatabaseError.
  void execute(const std::string& sql);
  // LISTEN on `channel` (already a valid identifier).
  void listen(const std::string& channel);
  // Waits until the socket is readable or `timeout` passes, then drains notifications. Returns
  // how many arrived.
  int wait_for_notifications(std::chrono::milliseconds timeout);

 private:
  struct Close {
    void operator()(PGconn* conn) const noexcept { PQfinish(conn); }
  };
  explicit Connection(PGconn* conn) : handle_(conn) {}
  std::unique_ptr<PGconn, Close> handle_;
};

}  // namespace outbox
