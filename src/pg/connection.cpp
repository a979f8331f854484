#include "pg/connection.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>

#include "common/log.hpp"
#include "common/redact.hpp"
#include "pg/statements.hpp"

namespace outbox::pg {

std::string first_line(const std::string& sql) {
  const auto start = sql.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return {};
  const auto end = sql.find('\n', start);
  return sql.substr(
      start, std::min<std::size_t>((end == std::string::npos ? sql.size() : end) - start, 60));
}

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

std::string quote_identifier(PGconn* conn, std::string_view name) {
  const std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeIdentifier(conn, name.data(), name.size()), &PQfreemem);
  if (!quoted) {
    throw DatabaseError(std::string("cannot quote an identifier: ") + PQerrorMessage(conn), "22021",
                        false);
  }
  return quoted.get();
}

Result exec(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  PGresult* raw = params.empty() ? PQexec(conn, sql.c_str())
                                 : PQexecParams(conn, sql.c_str(), static_cast<int>(params.size()),
                                                nullptr, params.data(), nullptr, nullptr, 0);
  Result result(raw);
  const ExecStatusType status = raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw make_error(conn, raw, "statement failed [" + first_line(sql) + "]");
  }
  return result;
}

void rollback_quietly(PGconn* conn) noexcept {
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) return;
  if (PQtransactionStatus(conn) == PQTRANS_IDLE) return;
  PQclear(PQexec(conn, "ROLLBACK"));
}

namespace {

struct ConnectFailure {
  std::string sqlstate;
  bool retryable = true;
  std::string hint;
};

// libpq exposes no SQLSTATE for a failed connection attempt (the server's error stays inside the
// PGconn), so the refusals no retry can fix are told by what libpq says. Servers send these
// messages in English unless lc_messages says otherwise; anything not recognised stays
// retryable, as before.
ConnectFailure classify_connect_failure(PGconn* conn, const std::string& message) {
  auto has = [&](std::string_view part) { return message.find(part) != std::string::npos; };
  if (PQconnectionNeedsPassword(conn) != 0 || has("no password supplied")) {
    return {"28P01", false,
            "the server wants a password and none was given: use --db-password-file, PGPASSFILE "
            "or PGPASSWORD (not the command line, where ps shows it)"};
  }
  if (has("password authentication failed") || has("SASL authentication failed")) {
    return {"28P01", false, "wrong user name or password"};
  }
  if (has("no pg_hba.conf entry") || (has("role \"") && has("does not exist"))) {
    return {"28000", false, "the server does not let this user in from here (pg_hba.conf)"};
  }
  // PostgreSQL 15 says "must be superuser or replication role to start walsender", 16 and later
  // "permission denied to start WAL sender": a replication connection of a role without the
  // REPLICATION attribute.
  if (has("replication role to start walsender") || has("permission denied to start WAL sender")) {
    return {"42501", false,
            "the role needs the REPLICATION attribute (ALTER ROLE ... REPLICATION) or superuser "
            "for a replication connection"};
  }
  if (has("database \"") && has("does not exist")) {
    return {"3D000", false, "no such database: check the dbname in --db"};
  }
  // A server that refuses a setting of `options` (-c statement_timeout=bad) or of the string:
  // the same next time.
  if (has("invalid value for parameter") || has("unrecognized configuration parameter") ||
      has("invalid command-line argument")) {
    return {"22023", false, "a setting in the connection string's options is refused: fix it"};
  }
  // libpq's own refusals of the string itself: "invalid connection option", an unclosed IPv6
  // bracket ("... matching \"]\" in IPv6 host address in URI"), a bad URI.
  if (message.starts_with("invalid ") || has("missing \"=\"") || has("unterminated quoted") ||
      has("in URI") || has("IPv6 host address") || has("certificate") || has("SSL was required") ||
      has("does not support SSL") || has("sslmode value")) {
    return {"08001", false, "the connection settings are wrong; no retry will fix them"};
  }
  return {"08001", true, ""};
}

}  // namespace

}  // namespace outbox::pg

namespace outbox {

using pg::make_error;

Connection Connection::open(const std::string& database_url, std::string_view application_name,
                            const std::vector<Setting>& overrides) {
  // With expand_dbname, settings in the user's string override the keywords before "dbname":
  // these are defaults; `overrides` come last and win over the string. Keepalives make a half-open
  // TCP connection fail within about a minute instead of the kernel's two hours; a relay stuck on
  // one would hold its leases meanwhile.
  const std::string app(application_name);
  std::vector<const char*> keys{"connect_timeout",  "keepalives_idle", "keepalives_interval",
                                "keepalives_count", "dbname",          "fallback_application_name"};
  std::vector<const char*> values{
      "10", "30", "10", "3", database_url.empty() ? nullptr : database_url.c_str(), app.c_str()};
  for (const Setting& setting : overrides) {
    keys.push_back(setting.keyword.c_str());
    values.push_back(setting.value.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  Connection connection(PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1));
  PGconn* handle = connection.get();
  if (handle == nullptr) throw DatabaseError("cannot connect: out of memory", "", true);
  if (PQstatus(handle) != CONNECTION_OK) {
    // Neither the string nor libpq's message (which may quote a part it could not parse) is
    // printed with its password.
    std::string message =
        detail::scrub(PQerrorMessage(handle), detail::connection_secrets(database_url));
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    const pg::ConnectFailure failure = pg::classify_connect_failure(handle, message);
    throw DatabaseError(
        "cannot connect to PostgreSQL (" +
            (database_url.empty() ? std::string("PG* environment")
                                  : detail::redact_connection_string(database_url)) +
            "): " + message + (failure.hint.empty() ? "" : " (" + failure.hint + ")") +
            ". Check --db / OUTBOX_DATABASE_URL.",
        failure.sqlstate, failure.retryable);
  }
  return connection;
}

bool Connection::healthy() const noexcept {
  return handle_ && PQstatus(handle_.get()) == CONNECTION_OK;
}

void Connection::execute(const std::string& sql) { pg::exec(get(), sql); }

void Connection::listen(const std::string& channel) { execute("LISTEN " + channel); }

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

}  // namespace outbox
