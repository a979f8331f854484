// Prepared statements: exec_prepared (connection.hpp), and the names prepared on a connection,
// kept as libpq instance data (statements.hpp).

#include <fmt/format.h>
#include <libpq-events.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "common/log.hpp"
#include "pg/connection.hpp"
#include "pg/statements.hpp"

namespace outbox::pg {
namespace {

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

}  // namespace

void PreparedNames::surprised(std::string_view what) {
  if (++surprises == 2) {
    detail::log().warn(
        "prepared statements keep vanishing or appearing on this connection ({}): a transaction "
        "pooler without prepared-statement support? Its statements run unprepared from now on",
        what);
  }
}

DatabaseError PreparedNames::already_there(const std::string& first_line, const std::string& name) {
  names.insert(name);
  surprised("a statement outbox had not prepared was there");
  return DatabaseError("statement [" + first_line + "]: a prepared statement named " + name +
                           " already existed on the connection and the attempt to prepare it " +
                           "aborted the transaction. Retry the transaction",
                       "42P05", true);
}

DatabaseError PreparedNames::vanished(const std::string& first_line, const std::string& name) {
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

void prepare(PGconn* conn, PreparedNames& prepared, const std::string& name, const std::string& sql,
             int params) {
  if (prepared.names.contains(name)) return;
  const bool in_transaction = PQtransactionStatus(conn) != PQTRANS_IDLE;
  const Result parsed(PQprepare(conn, name.c_str(), sql.c_str(), params, nullptr));
  const ExecStatusType status =
      parsed.get() != nullptr ? PQresultStatus(parsed.get()) : PGRES_FATAL_ERROR;
  const char* state =
      parsed.get() != nullptr ? PQresultErrorField(parsed.get(), PG_DIAG_SQLSTATE) : nullptr;
  if (status != PGRES_COMMAND_OK && (state == nullptr || std::string_view(state) != "42P05")) {
    throw make_error(conn, parsed.get(), "preparing statement failed [" + first_line(sql) + "]");
  }
  if (status == PGRES_COMMAND_OK) {
    prepared.names.insert(name);
  } else {
    DatabaseError error = prepared.already_there(first_line(sql), name);
    if (in_transaction) throw error;  // outside one: use it
  }
}

Result exec_prepared(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  PreparedNames& prepared = prepared_names(conn);
  const std::string name = statement_name(sql);
  for (int attempt = 0;; ++attempt) {
    if (prepared.unprepared()) return exec(conn, sql, params);
    const bool in_transaction = PQtransactionStatus(conn) != PQTRANS_IDLE;
    prepare(conn, prepared, name, sql, static_cast<int>(params.size()));
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

}  // namespace outbox::pg
