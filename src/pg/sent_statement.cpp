// A statement sent without waiting for its answer (connection.hpp: send_prepared, answer_arrived,
// take_answer): the caller works on while the server runs it.
#include <string_view>

#include "pg/connection.hpp"
#include "pg/statements.hpp"

namespace outbox::pg {

void send_prepared(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  PreparedNames& prepared = prepared_names(conn);
  const int count = static_cast<int>(params.size());
  if (prepared.unprepared()) {
    if (PQsendQueryParams(conn, sql.c_str(), count, nullptr, params.data(), nullptr, nullptr, 0) ==
        0) {
      throw make_error(conn, nullptr, "sending statement failed [" + first_line(sql) + "]");
    }
    return;
  }
  const std::string name = statement_name(sql);
  prepare(conn, prepared, name, sql, count);  // waits for its answer, once per connection
  if (PQsendQueryPrepared(conn, name.c_str(), count, params.data(), nullptr, nullptr, 0) == 0) {
    throw make_error(conn, nullptr, "sending statement failed [" + first_line(sql) + "]");
  }
}

bool answer_arrived(PGconn* conn) {
  if (PQconsumeInput(conn) == 0) throw make_error(conn, nullptr, "reading a statement's answer");
  return PQisBusy(conn) == 0;
}

Result take_answer(PGconn* conn, const std::string& sql) {
  Result result(PQgetResult(conn));
  while (PGresult* rest = PQgetResult(conn)) PQclear(rest);  // until libpq says it is over
  const ExecStatusType status =
      result.get() != nullptr ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
  const char* state =
      result.get() != nullptr ? PQresultErrorField(result.get(), PG_DIAG_SQLSTATE) : nullptr;
  if (state != nullptr && std::string_view(state) == "26000") {
    PreparedNames& prepared = prepared_names(conn);
    if (!prepared.unprepared()) {
      throw prepared.vanished(first_line(sql), statement_name(sql));  // prepared again next time
    }
  }
  throw make_error(conn, result.get(), "statement failed [" + first_line(sql) + "]");
}

}  // namespace outbox::pg
