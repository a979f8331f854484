#pragma once
// What the saga examples (order-service, payment-service) share: a few lines of libpq, a
// transaction that rolls back unless committed, and the named crash points the saga test arms.
// Header only, so each example stays one CMake project built against the installed package.

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <outbox/transaction.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace example {

using Connection = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;
using Params = std::vector<std::optional<std::string>>;  // std::nullopt is SQL NULL

inline Connection connect(const std::string& url) {
  Connection conn(PQconnectdb(url.c_str()), &PQfinish);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    throw std::runtime_error(std::string("cannot connect to PostgreSQL: ") +
                             PQerrorMessage(conn.get()));
  }
  return conn;
}

// A statement that failed. retryable(): the connection broke or the server asks to try again
// (a serialization failure, a deadlock, a shutdown, too many connections); else a bug to fix.
class DatabaseFailure : public std::runtime_error {
 public:
  DatabaseFailure(const std::string& message, bool retryable)
      : std::runtime_error(message), retryable_(retryable) {}
  [[nodiscard]] bool retryable() const noexcept { return retryable_; }

 private:
  bool retryable_;
};

// One statement with text parameters; throws DatabaseFailure unless it succeeded.
inline Result exec(PGconn* conn, const std::string& sql, const Params& params = {}) {
  std::vector<const char*> values;
  for (const auto& param : params) values.push_back(param ? param->c_str() : nullptr);
  Result result(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0),
                &PQclear);
  const ExecStatusType status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    std::string message = PQerrorMessage(conn);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    const char* field = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
    const std::string state = field != nullptr ? field : "";
    const bool retryable = PQstatus(conn) != CONNECTION_OK || state.starts_with("40") ||
                           state.starts_with("08") || state.starts_with("53") ||
                           state.starts_with("57");
    throw DatabaseFailure(message, retryable);
  }
  return result;
}

inline int rows(const Result& result) { return PQntuples(result.get()); }
inline std::string value(const Result& result, int row, int column) {
  return PQgetvalue(result.get(), row, column);
}
inline long affected(const Result& result) { return std::atol(PQcmdTuples(result.get())); }

// BEGIN now; ROLLBACK when destroyed with the transaction still open (an exception, an early
// return, a commit that failed before COMMIT was sent), so nothing of a failed request is left
// half-written and the connection goes back idle. commit() throws outbox::OutcomeUnknown when the
// connection broke while COMMIT was in flight: the caller cannot tell, and must not claim either.
class Transaction {
 public:
  explicit Transaction(PGconn* conn) : conn_(conn) { exec(conn_, "BEGIN"); }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    if (PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      PQclear(PQexec(conn_, "ROLLBACK"));
    }
  }
  void commit() { outbox::commit(conn_); }

 private:
  PGconn* conn_;
};

// `conn` ready for a new transaction: opened (again) when missing or broken, rolled back when a
// failure left a transaction open on it.
inline PGconn* ready(Connection& conn, const std::string& url) {
  if (conn && PQstatus(conn.get()) == CONNECTION_OK &&
      PQtransactionStatus(conn.get()) != PQTRANS_IDLE) {
    PQclear(PQexec(conn.get(), "ROLLBACK"));
  }
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK ||
      PQtransactionStatus(conn.get()) != PQTRANS_IDLE) {
    conn = connect(url);
  }
  return conn.get();
}

// Runs consumer.run() (an outbox inbox consumer) on a thread of its own. run() retries a failing
// effect with backoff, parks it when gap-aware, and reconnects by itself; what no retry fixes (a
// missing inbox table) ends it: then this says so, sets `exit_code` to 1 and sends the process
// SIGTERM, so the service stops as on a signal (its main thread waits in sigwait for one).
template <typename Consumer>
std::thread inbox_thread(Consumer& consumer, const char* service, std::atomic<int>& exit_code) {
  return std::thread([&consumer, service, &exit_code] {
    try {
      consumer.run();
    } catch (const std::exception& e) {
      std::cerr << service << ": the inbox consumer stopped: " << e.what() << std::endl;
      exit_code = 1;
      kill(getpid(), SIGTERM);
    }
  });
}

// A named step where the saga test kills the process: SAGA_CRASH_AT=<step>[@N] makes the Nth
// pass through <step> (default the first) end the process with SIGKILL, as a power cut would.
// Each call names a window in which a crash must lose nothing and double nothing.
inline void crash_point(const char* step) {
  static const std::string spec = [] {
    const char* env = std::getenv("SAGA_CRASH_AT");
    return std::string(env != nullptr ? env : "");
  }();
  if (spec.empty()) return;
  const std::size_t at = spec.find('@');
  if (spec.substr(0, at) != step) return;
  static std::atomic<int> hits{0};
  const int wanted = at == std::string::npos ? 1 : std::atoi(spec.c_str() + at + 1);
  if (++hits == wanted) {
    std::cerr << "crash point " << step << ": SIGKILL (SAGA_CRASH_AT)" << std::endl;
    std::raise(SIGKILL);
  }
}

}  // namespace example
