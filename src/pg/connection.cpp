#include "pg/connection.hpp"

#include <poll.h>

#include <charconv>
#include <cstring>

namespace outbox::pg {

bool is_retryable_sqlstate(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return false;
  const std::string_view cls = sqlstate.substr(0, 2);
  if (cls == "08" || cls == "53") return true;
  return sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03" || sqlstate == "57P01" ||
         sqlstate == "57P02" || sqlstate == "57P03";
}

DatabaseError make_error(PGconn* conn, const PGresult* result, std::string_view what) {
  std::string sqlstate;
  std::string message;
  if (result != nullptr) {
    if (const char* s = PQresultErrorField(result, PG_DIAG_SQLSTATE)) sqlstate = s;
    message = PQresultErrorMessage(result);
  }
  if (message.empty() && conn != nullptr) message = PQerrorMessage(conn);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  // The server sends a SQLSTATE with every error; one without was raised by libpq itself. A failed
  // send is reported before PQstatus turns bad, so read from the socket once: a closed connection
  // then shows as CONNECTION_BAD, while libpq's own misuse errors stay non-retryable.
  if (sqlstate.empty() && conn != nullptr && PQstatus(conn) == CONNECTION_OK) {
    PQconsumeInput(conn);
  }
  const bool connection_lost = conn != nullptr && PQstatus(conn) == CONNECTION_BAD;
  if (sqlstate.empty() && connection_lost) sqlstate = "08006";
  std::string text = std::string(what) + ": " + message;
  if (!sqlstate.empty()) text += " (SQLSTATE " + sqlstate + ")";
  return DatabaseError(text, sqlstate, connection_lost || is_retryable_sqlstate(sqlstate));
}

std::int64_t Result::int64(int row, int column) const {
  const std::string_view t = text(row, column);
  std::int64_t value = 0;
  std::from_chars(t.data(), t.data() + t.size(), value);
  return value;
}

std::int64_t Result::affected() const {
  const char* tuples = PQcmdTuples(handle_.get());
  std::int64_t value = 0;
  std::from_chars(tuples, tuples + std::strlen(tuples), value);
  return value;
}

Result exec(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  PGresult* raw = params.empty() ? PQexec(conn, sql.c_str())
                                 : PQexecParams(conn, sql.c_str(), static_cast<int>(params.size()),
                                                nullptr, params.data(), nullptr, nullptr, 0);
  Result result(raw);
  const ExecStatusType status = raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    // The first line of the statement is enough to say which one failed.
    const auto end = sql.find('\n');
    throw make_error(conn, raw,
                     "statement failed [" + sql.substr(0, std::min<std::size_t>(end, 60)) + "]");
  }
  return result;
}

void commit(PGconn* conn) {
  PGresult* raw = PQexec(conn, "COMMIT");
  Result result(raw);
  if (raw != nullptr && PQresultStatus(raw) == PGRES_COMMAND_OK) {
    // COMMIT of an already failed transaction "succeeds" with the tag ROLLBACK.
    if (std::strcmp(PQcmdStatus(raw), "COMMIT") == 0) return;
    throw DatabaseError("COMMIT rolled back instead: a statement in the transaction had failed",
                        "25P02", false);
  }
  // A server that refused the COMMIT says why with a SQLSTATE. Without one the failure was the
  // client's (the connection broke, possibly before PQstatus shows it): whether the server
  // committed is unknown.
  const bool server_answered =
      raw != nullptr && PQresultErrorField(raw, PG_DIAG_SQLSTATE) != nullptr;
  if (PQstatus(conn) == CONNECTION_BAD || !server_answered) {
    throw OutcomeUnknown(
        "the connection broke during COMMIT: the transaction may or may not have committed");
  }
  throw make_error(conn, raw, "COMMIT failed");
}

void rollback_quietly(PGconn* conn) noexcept {
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) return;
  if (PQtransactionStatus(conn) == PQTRANS_IDLE) return;
  PQclear(PQexec(conn, "ROLLBACK"));
}

Connection Connection::open(const std::string& database_url, std::string_view application_name) {
  // With expand_dbname, settings in the user's string override the keywords before "dbname":
  // these are defaults. Keepalives make a half-open TCP connection fail within about a minute
  // instead of the kernel's two hours; a relay stuck on one would hold its leases meanwhile.
  const std::string app(application_name);
  const char* keys[] = {"connect_timeout",
                        "keepalives_idle",
                        "keepalives_interval",
                        "keepalives_count",
                        "dbname",
                        "fallback_application_name",
                        nullptr};
  const char* values[] = {
      "10",        "30",   "10", "3", database_url.empty() ? nullptr : database_url.c_str(),
      app.c_str(), nullptr};
  ConnHandle handle(PQconnectdbParams(keys, values, /*expand_dbname=*/1));
  if (!handle) throw DatabaseError("cannot connect: out of memory", "", true);
  if (PQstatus(handle.get()) != CONNECTION_OK) {
    std::string message = PQerrorMessage(handle.get());
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw DatabaseError("cannot connect to PostgreSQL (" +
                            (database_url.empty() ? std::string("PG* environment") : database_url) +
                            "): " + message + ". Check --db / OUTBOX_DATABASE_URL.",
                        "08001", true);
  }
  return Connection(std::move(handle));
}

bool Connection::healthy() const noexcept {
  return handle_ && PQstatus(handle_.get()) == CONNECTION_OK;
}

void Connection::listen(const std::string& channel) { exec(get(), "LISTEN " + channel); }

int Connection::wait_for_notifications(std::chrono::milliseconds timeout) {
  PGconn* conn = get();
  int count = 0;
  auto drain = [&] {
    if (PQconsumeInput(conn) == 0) throw make_error(conn, nullptr, "reading notifications");
    while (PGnotify* notify = PQnotifies(conn)) {
      PQfreemem(notify);
      ++count;
    }
  };
  drain();
  if (count > 0 || timeout.count() <= 0) return count;
  pollfd fd{PQsocket(conn), POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(timeout.count())) > 0) drain();
  return count;
}

}  // namespace outbox::pg
