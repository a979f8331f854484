#pragma once
// What the pg files share about a statement they send: its first line (for error messages), its
// prepared name, and the names prepared on a connection (prepared_statements.cpp; the pipelined
// commit, pipeline_commit.cpp, prepares through them too). Internal to src/pg/.

#include <libpq-fe.h>

#include <string>
#include <string_view>
#include <unordered_set>

#include "outbox/error.hpp"

namespace outbox::pg {

// Enough of a statement to say which one failed: its first non-blank line, at most 60 bytes.
std::string first_line(const std::string& sql);

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
  void surprised(std::string_view what);
  // 42P05 on preparing `name`: the session already has it (names are outbox_ plus a hash of the
  // text, so it is this statement, prepared in a session state we did not see). Returns the
  // error for when the failed Prepare aborted the caller's transaction.
  DatabaseError already_there(const std::string& first_line, const std::string& name);
  // 26000 on executing `name`: the server no longer knows it (DISCARD ALL, DEALLOCATE, another
  // server behind a pooler). Returns the error for when this aborted the caller's transaction.
  DatabaseError vanished(const std::string& first_line, const std::string& name);
};

// This connection's PreparedNames, made and attached on first use. Throws DatabaseError when
// libpq refuses to attach them.
PreparedNames& prepared_names(PGconn* conn);

// Named after the text's hash, so one text is prepared once per session, also by two processes
// sharing it through a pooler (a name found already prepared is taken to mean the same text).
std::string statement_name(const std::string& sql);

// Prepares `sql` as `name` on `conn` unless `prepared` says it is there (waits for the answer).
// Throws DatabaseError as the server refuses it; a name the session already had (42P05) is used
// outside a transaction and, inside one (now aborted), a retryable error.
void prepare(PGconn* conn, PreparedNames& prepared, const std::string& name, const std::string& sql,
             int params);

}  // namespace outbox::pg
