#pragma once
// Thin RAII over libpq: one owner per handle, every failure turned into DatabaseError carrying the
// SQLSTATE and whether a retry can help. The relay (both sources), the inbox, the schema, the
// operator actions and the replication client share it.

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/holder.hpp"
#include "outbox/connection.hpp"
#include "outbox/error.hpp"

namespace outbox::pg {

using ConnHandle = detail::Holder<PGconn, &PQfinish>;
using ResultHandle = detail::Holder<PGresult, &PQclear>;

// True for SQLSTATEs where the same statement may succeed later: connection failures (08),
// serialization failures and deadlocks (40001, 40P01), lack of resources (53), operator
// intervention such as a server shutdown (57P01..57P03), lock timeouts (55P03).
bool is_retryable_sqlstate(std::string_view sqlstate);

// Builds the DatabaseError for a failed statement (`result` may be null) on `conn`.
DatabaseError make_error(PGconn* conn, const PGresult* result, std::string_view what);

class Result {
 public:
  explicit Result(PGresult* result) : handle_(result) {}
  [[nodiscard]] int rows() const { return PQntuples(handle_.get()); }
  [[nodiscard]] bool is_null(int row, int column) const {
    return PQgetisnull(handle_.get(), row, column) != 0;
  }
  [[nodiscard]] std::string_view text(int row, int column) const {
    return {PQgetvalue(handle_.get(), row, column),
            static_cast<std::size_t>(PQgetlength(handle_.get(), row, column))};
  }
  [[nodiscard]] std::int64_t int64(int row, int column) const;
  // Rows touched by INSERT/UPDATE/DELETE.
  [[nodiscard]] std::int64_t affected() const;
  [[nodiscard]] PGresult* get() const noexcept { return handle_.get(); }

 private:
  ResultHandle handle_;
};

// `name` as a quoted SQL identifier (PQescapeIdentifier: the connection's encoding decides what a
// character is). Throws DatabaseError when libpq refuses it (bytes invalid in that encoding).
std::string quote_identifier(PGconn* conn, std::string_view name);

// Runs one statement with text parameters (nullptr = SQL NULL). Throws DatabaseError unless the
// server answered COMMAND_OK or TUPLES_OK.
Result exec(PGconn* conn, const std::string& sql, const std::vector<const char*>& params = {});

// Like exec, but as a named prepared statement, prepared on this connection the first time (the
// plan is then reused: no parse, analysis or planning per call). The name is derived from the
// text, so statements of different schemas never share one. Prepared statements outlive a
// rolled-back transaction; PQreset and a new connection start afresh.
//
// A statement that vanished from the server (DISCARD ALL, DEALLOCATE, a transaction pooler that
// switched server connections) is prepared again and run at once outside a transaction; inside
// one the transaction is already aborted, so it throws a retryable DatabaseError saying so.
Result exec_prepared(PGconn* conn, const std::string& sql,
                     const std::vector<const char*>& params = {});

// A statement sent without waiting for its answer, so the caller works on while the server runs
// it (the CDC relay's marks: relay/cdc/streamed_marks.hpp). One at a time per connection, outside
// a transaction, and nothing else on that connection until take_answer(). Prepared as
// exec_prepared prepares (that Prepare waits for its answer, once per connection). Throws
// DatabaseError when it cannot be sent.
void send_prepared(PGconn* conn, const std::string& sql,
                   const std::vector<const char*>& params = {});
// Whether the answer of the statement sent has arrived; never blocks. Throws DatabaseError when
// the connection broke.
bool answer_arrived(PGconn* conn);
// The answer of the statement sent (waits for it), as exec_prepared's; DatabaseError as the server
// refused it (a vanished prepared statement: retryable, and prepared again by the next send).
Result take_answer(PGconn* conn, const std::string& sql);

// One statement of a pipeline: its text and its text parameters (nullptr = SQL NULL).
struct Statement {
  const std::string* sql;
  std::vector<const char*> params;
};

// Runs `statements` and then COMMIT in one round trip (libpq pipeline mode) on a connection
// inside a transaction, and returns the statements' results in order. Statements run prepared
// when `prepare` (prepared in the same round trip the first time; see exec_prepared).
// Throws:
//  - DatabaseError as the server refused a statement: the transaction is aborted (roll it back);
//    a vanished prepared statement is SQLSTATE 26000, retryable, as in exec_prepared;
//  - DatabaseError as the server refused the COMMIT: the transaction is over;
//  - DatabaseError (retryable) when the connection broke before COMMIT was handed to libpq: the
//    server cannot have committed;
//  - OutcomeUnknown (not retryable) when it broke after: the transaction may have committed.
std::vector<Result> exec_then_commit(PGconn* conn, const std::vector<Statement>& statements,
                                     bool prepare);

// COMMIT that tells a refused commit (DatabaseError) from a broken connection during the commit
// (OutcomeUnknown, retryable when `redo_is_safe`: the caller's work is idempotent).
void commit(PGconn* conn, bool redo_is_safe = false);
// ROLLBACK that never throws; for cleanup paths.
void rollback_quietly(PGconn* conn) noexcept;

// An owned connection: outbox/connection.hpp.
using Connection = outbox::Connection;

}  // namespace outbox::pg
