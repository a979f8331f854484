#include "pg/connection.hpp"

#include <fmt/format.h>
#include <libpq-events.h>
#include <poll.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "common/log.hpp"
#include "common/redact.hpp"

namespace outbox::pg {

namespace {

// Enough of a statement to say which one failed: its first non-blank line, at most 60 bytes.
std::string first_line(const std::string& sql) {
  const auto start = sql.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return {};
  const auto end = sql.find('\n', start);
  return sql.substr(
      start, std::min<std::size_t>((end == std::string::npos ? sql.size() : end) - start, 60));
}

}  // namespace

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

namespace {

// The names prepared on one connection, kept as libpq instance data so they live and die with
// the PGconn, whoever owns it (for the producer that is the caller's connection).
struct PreparedNames {
  std::unordered_set<std::string> names;
  // How often a statement we prepared was missing (26000) or one we had not was there (42P05):
  // the session is not what we saw. From the second time on this connection runs its statements
  // unprepared: behind a transaction pooler that does not track prepared statements each
  // transaction may land on another server connection, and retries would keep failing.
  int surprises = 0;
  [[nodiscard]] bool unprepared() const { return surprises >= 2; }
  void surprised(std::string_view what) {
    if (++surprises == 2) {
      detail::log().warn(
          "prepared statements keep vanishing or appearing on this connection ({}): a transaction "
          "pooler without prepared-statement support? Its statements run unprepared from now on",
          what);
    }
  }
  // 42P05 on preparing `name`: the session already has it (names are outbox_ plus a hash of the
  // text, so it is this statement, prepared in a session state we did not see). Returns the
  // error for when the failed Prepare aborted the caller's transaction.
  DatabaseError already_there(const std::string& first_line, const std::string& name) {
    names.insert(name);
    surprised("a statement outbox had not prepared was there");
    return DatabaseError("statement [" + first_line + "]: a prepared statement named " + name +
                             " already existed on the connection and the attempt to prepare it " +
                             "aborted the transaction. Retry the transaction",
                         "42P05", true);
  }
  // 26000 on executing `name`: the server no longer knows it (DISCARD ALL, DEALLOCATE, another
  // server behind a pooler). Returns the error for when this aborted the caller's transaction.
  DatabaseError vanished(const std::string& first_line, const std::string& name) {
    names.erase(name);
    surprised("a statement outbox had prepared was gone");
    return DatabaseError(
        "statement [" + first_line + "]: its prepared statement " + name +
            " vanished from the server (DISCARD ALL, DEALLOCATE, or a transaction pooler that "
            "moved the session); the transaction was aborted. Retry it: the next try prepares "
            "again. Behind a pooler in transaction mode without prepared-statement support, run "
            "these statements unprepared",
        "26000", true);
  }
};

int prepared_names_event(PGEventId event, void* info, void* /*pass_through*/) {
  switch (event) {
    case PGEVT_CONNRESET: {
      auto* reset = static_cast<PGEventConnReset*>(info);
      if (auto* data =
              static_cast<PreparedNames*>(PQinstanceData(reset->conn, prepared_names_event))) {
        data->names.clear();  // a reset connection is a new session
      }
      break;
    }
    case PGEVT_CONNDESTROY: {
      auto* destroy = static_cast<PGEventConnDestroy*>(info);
      delete static_cast<PreparedNames*>(PQinstanceData(destroy->conn, prepared_names_event));
      break;
    }
    default:
      break;
  }
  return 1;
}

PreparedNames& prepared_names(PGconn* conn) {
  if (auto* data = static_cast<PreparedNames*>(PQinstanceData(conn, prepared_names_event))) {
    return *data;
  }
  auto data = std::make_unique<PreparedNames>();  // before registering: nothing left half-done
  if (PQregisterEventProc(conn, prepared_names_event, "outbox prepared statements", nullptr) == 0) {
    throw DatabaseError("could not register outbox's libpq event procedure on the connection", "",
                        false);
  }
  if (PQsetInstanceData(conn, prepared_names_event, data.get()) == 0) {
    throw DatabaseError("could not attach outbox's prepared-statement list to the connection", "",
                        false);
  }
  return *data.release();
}

// Named after the text's hash, so one text is prepared once per session, also by two processes
// sharing it through a pooler (a name found already prepared is taken to mean the same text).
// FNV-1a over 8-byte words, then MurmurHash3's finalizer to mix the high bits down: a fixed
// 64-bit function (std::hash differs between standard libraries and is 32 bits on 32-bit
// targets). Byte by byte, hashing the relay's ~3 KB claim was 3.5% of the relay's CPU at 1,000
// events/s (perf).
std::string statement_name(const std::string& sql) {
  constexpr std::uint64_t kPrime = 1099511628211ULL;
  std::uint64_t hash = 14695981039346656037ULL ^ sql.size();
  std::size_t i = 0;
  for (; i + 8 <= sql.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, sql.data() + i, sizeof word);
    hash = (hash ^ word) * kPrime;
  }
  for (; i < sql.size(); ++i) hash = (hash ^ static_cast<unsigned char>(sql[i])) * kPrime;
  hash ^= hash >> 33;
  hash *= 0xff51afd7ed558ccdULL;
  hash ^= hash >> 33;
  hash *= 0xc4ceb9fe1a85ec53ULL;
  hash ^= hash >> 33;
  return fmt::format("outbox_{:016x}", hash);
}

}  // namespace

Result exec_prepared(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  PreparedNames& prepared = prepared_names(conn);
  const std::string name = statement_name(sql);
  for (int attempt = 0;; ++attempt) {
    if (prepared.unprepared()) return exec(conn, sql, params);
    const bool in_transaction = PQtransactionStatus(conn) != PQTRANS_IDLE;
    if (!prepared.names.contains(name)) {
      Result parsed(
          PQprepare(conn, name.c_str(), sql.c_str(), static_cast<int>(params.size()), nullptr));
      const ExecStatusType status =
          parsed.get() != nullptr ? PQresultStatus(parsed.get()) : PGRES_FATAL_ERROR;
      const char* state =
          parsed.get() != nullptr ? PQresultErrorField(parsed.get(), PG_DIAG_SQLSTATE) : nullptr;
      if (status != PGRES_COMMAND_OK && (state == nullptr || std::string_view(state) != "42P05")) {
        throw make_error(conn, parsed.get(),
                         "preparing statement failed [" + first_line(sql) + "]");
      }
      if (status == PGRES_COMMAND_OK) {
        prepared.names.insert(name);
      } else {
        DatabaseError error = prepared.already_there(first_line(sql), name);
        if (in_transaction) throw error;  // outside one: use it
      }
    }
    Result result(PQexecPrepared(conn, name.c_str(), static_cast<int>(params.size()), params.data(),
                                 nullptr, nullptr, 0));
    const ExecStatusType status =
        result.get() != nullptr ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
    const char* state =
        result.get() != nullptr ? PQresultErrorField(result.get(), PG_DIAG_SQLSTATE) : nullptr;
    if (state == nullptr || std::string_view(state) != "26000") {
      throw make_error(conn, result.get(), "statement failed [" + first_line(sql) + "]");
    }
    DatabaseError error = prepared.vanished(first_line(sql), name);
    if (in_transaction) throw error;  // outside one: prepare again and run it once more
    if (attempt > 0) {
      throw DatabaseError("statement [" + first_line(sql) + "]: its prepared statement " + name +
                              " vanished again right after being prepared; the statement did " +
                              "not run. Try again",
                          "26000", true);
    }
  }
}

namespace {
// The answer to a COMMIT: returns if it committed; DatabaseError if the server refused or rolled
// back; OutcomeUnknown(`lost`) if no answer came from the server.
void check_commit(PGconn* conn, const PGresult* raw, const char* lost, bool redo_is_safe);
}  // namespace

namespace {

// What each command of a pipeline is: statement i's Prepare, statement i's execution, COMMIT.
struct PipelineCommand {
  enum Kind { prepare, execute, commit } kind;
  std::size_t statement;
  std::string name;  // the prepared statement's name; empty when run unprepared
};

DatabaseError lost_before_commit(PGconn* conn) {
  DatabaseError error = make_error(conn, nullptr, "sending the statements and COMMIT failed");
  return DatabaseError(
      std::string(error.what()) + "; COMMIT was never sent, so the transaction did not commit",
      error.sqlstate().empty() ? "08006" : error.sqlstate(), true);
}

// Queues every statement (with a Prepare before the first use of a name) and COMMIT. Throws
// lost_before_commit() when libpq refuses to queue one: nothing committed.
std::vector<PipelineCommand> send_pipeline(PGconn* conn, const std::vector<Statement>& statements,
                                           const PreparedNames* prepared) {
  std::vector<PipelineCommand> commands;
  std::unordered_set<std::string> preparing;  // Prepares queued in this pipeline
  for (std::size_t i = 0; i < statements.size(); ++i) {
    const Statement& statement = statements[i];
    const int n = static_cast<int>(statement.params.size());
    int sent = 0;
    if (prepared == nullptr) {
      sent = PQsendQueryParams(conn, statement.sql->c_str(), n, nullptr, statement.params.data(),
                               nullptr, nullptr, 0);
      commands.push_back({PipelineCommand::execute, i, {}});
    } else {
      std::string name = statement_name(*statement.sql);
      if (!prepared->names.contains(name) && preparing.insert(name).second) {
        if (PQsendPrepare(conn, name.c_str(), statement.sql->c_str(), n, nullptr) == 0) {
          throw lost_before_commit(conn);
        }
        commands.push_back({PipelineCommand::prepare, i, name});
      }
      sent =
          PQsendQueryPrepared(conn, name.c_str(), n, statement.params.data(), nullptr, nullptr, 0);
      commands.push_back({PipelineCommand::execute, i, std::move(name)});
    }
    if (sent == 0) throw lost_before_commit(conn);
  }
  if (PQsendQueryParams(conn, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) == 0) {
    throw lost_before_commit(conn);
  }
  commands.push_back({PipelineCommand::commit, 0, {}});
  return commands;
}

// Reads the pipeline's answers: each command answers with one result and then a null; the
// pipeline ends with a sync result; after a failed command the rest answer
// PGRES_PIPELINE_ABORTED. A command without an answer (the connection broke) keeps a null.
std::vector<ResultHandle> read_pipeline(PGconn* conn, std::size_t commands, bool sync_sent) {
  std::vector<ResultHandle> answers(commands);
  bool synced = false;
  for (std::size_t index = 0; sync_sent && !synced;) {
    PGresult* raw = PQgetResult(conn);
    if (raw == nullptr) {
      if (PQstatus(conn) == CONNECTION_BAD) break;
      ++index;
      continue;
    }
    if (PQresultStatus(raw) == PGRES_PIPELINE_SYNC) {
      PQclear(raw);
      synced = true;
    } else if (index < answers.size() && answers[index].get() == nullptr) {
      answers[index].reset(raw);
    } else {
      PQclear(raw);
    }
    if (!synced && PQstatus(conn) == CONNECTION_BAD) break;
  }
  if (synced) PQexitPipelineMode(conn);
  return answers;
}

// The statements' results in order, up to the first command without an answer. Throws the
// server's refusal of a statement (a vanished or already existing prepared statement as its own
// retryable error).
std::vector<Result> statement_results(PGconn* conn, const std::vector<Statement>& statements,
                                      const std::vector<PipelineCommand>& commands,
                                      std::vector<ResultHandle>& answers, PreparedNames& prepared) {
  std::vector<Result> results;
  for (std::size_t c = 0; c + 1 < commands.size(); ++c) {
    const PipelineCommand& command = commands[c];
    const PGresult* answer = answers[c].get();
    const ExecStatusType status = answer != nullptr ? PQresultStatus(answer) : PGRES_FATAL_ERROR;
    const char* sqlstate =
        answer != nullptr ? PQresultErrorField(answer, PG_DIAG_SQLSTATE) : nullptr;
    const std::string state = sqlstate != nullptr ? sqlstate : "";
    const std::string& sql = *statements[command.statement].sql;
    if (command.kind == PipelineCommand::prepare) {
      if (status == PGRES_COMMAND_OK) {
        prepared.names.insert(command.name);
        continue;
      }
      if (state == "42P05") throw prepared.already_there(first_line(sql), command.name);
    } else if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      results.emplace_back(answers[c].release());
      continue;
    } else if (state == "26000" && !command.name.empty()) {
      throw prepared.vanished(first_line(sql), command.name);
    }
    if (status == PGRES_PIPELINE_ABORTED) continue;  // an earlier command failed: reported below
    if (!state.empty())
      throw make_error(conn, answer, "statement failed [" + first_line(sql) + "]");
    break;  // no answer from the server: the connection broke, and COMMIT had been sent
  }
  return results;
}

}  // namespace

std::vector<Result> exec_then_commit(PGconn* conn, const std::vector<Statement>& statements,
                                     bool prepare) {
  PreparedNames& prepared = prepared_names(conn);
  const bool use_prepared = prepare && !prepared.unprepared();
  if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF || PQenterPipelineMode(conn) == 0) {
    throw DatabaseError(
        "could not enter libpq pipeline mode (is a command still running on the "
        "connection?): " +
            std::string(PQerrorMessage(conn)),
        "", false);
  }
  const std::vector<PipelineCommand> commands =
      send_pipeline(conn, statements, use_prepared ? &prepared : nullptr);
  const bool sync_sent = PQpipelineSync(conn) != 0;
  std::vector<ResultHandle> answers = read_pipeline(conn, commands.size(), sync_sent);
  std::vector<Result> results = statement_results(conn, statements, commands, answers, prepared);
  const char* lost =
      "the connection broke after the statements and COMMIT were sent: the transaction may or "
      "may not have committed";
  if (results.size() != statements.size()) throw OutcomeUnknown(lost);
  check_commit(conn, answers.back().get(), lost, false);
  return results;
}

void commit(PGconn* conn, bool redo_is_safe) {
  const Result result(PQexec(conn, "COMMIT"));
  check_commit(conn, result.get(),
               "the connection broke during COMMIT: the transaction may or may not have committed",
               redo_is_safe);
}

namespace {
void check_commit(PGconn* conn, const PGresult* raw, const char* lost, bool redo_is_safe) {
  if (raw != nullptr && PQresultStatus(raw) == PGRES_COMMAND_OK) {
    // COMMIT of an already failed transaction "succeeds" with the tag ROLLBACK.
    if (std::strcmp(PQcmdStatus(const_cast<PGresult*>(raw)), "COMMIT") == 0) return;
    throw DatabaseError("COMMIT rolled back instead: a statement in the transaction had failed",
                        "25P02", false);
  }
  // A server that refused the COMMIT says why with a SQLSTATE. Without one the failure was the
  // client's (the connection broke, possibly before PQstatus shows it): whether the server
  // committed is unknown.
  const bool server_answered =
      raw != nullptr && PQresultErrorField(raw, PG_DIAG_SQLSTATE) != nullptr;
  if (PQstatus(conn) == CONNECTION_BAD || !server_answered)
    throw OutcomeUnknown(lost, redo_is_safe);
  throw make_error(conn, raw, "COMMIT failed");
}
}  // namespace

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
