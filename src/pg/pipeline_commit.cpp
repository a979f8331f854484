// exec_then_commit and commit (connection.hpp): statements and COMMIT in one round trip, and a
// COMMIT that tells a refused commit from a lost answer.

#include <cstring>
#include <unordered_set>

#include "pg/connection.hpp"
#include "pg/statements.hpp"

namespace outbox::pg {

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

}  // namespace outbox::pg
