#include "outbox/transaction.hpp"

#include <cstdint>
#include <optional>
#include <string_view>
#include <thread>

#include "common/fault.hpp"
#include "pg/connection.hpp"
#include "producer/commit_resolution.hpp"

namespace outbox {

const char* to_string(TransactionStatus status) noexcept {
  switch (status) {
    case TransactionStatus::committed:
      return "committed";
    case TransactionStatus::aborted:
      return "aborted";
    case TransactionStatus::in_progress:
      return "in progress";
    case TransactionStatus::unknown:
      return "unknown";
  }
  return "?";
}

void commit(PGconn* conn) {
  OUTBOX_FAULT(fault::kProducerBeforeCommit);
  try {
    pg::commit(conn);
  } catch (const OutcomeUnknown& e) {
    throw OutcomeUnknown(
        std::string(e.what()) +
        "; ask outbox::resolve_commit() on a new connection with the id that "
        "enqueue returned (EnqueuedEvent::transaction_id) before running it again");
  }
  OUTBOX_FAULT(fault::kProducerAfterCommit);
}

std::uint64_t current_transaction_id(PGconn* conn) {
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_INTRANS) {
    throw InvalidArgument("current_transaction_id: no transaction is open on the connection");
  }
  return static_cast<std::uint64_t>(pg::exec(conn, "SELECT txid_current()").int64(0, 0));
}

namespace detail {

Ask ask_on(PGconn* conn) {
  return [conn](const std::string& sql, const std::vector<std::string>& params) {
    std::vector<const char*> pointers;
    for (const std::string& param : params) pointers.push_back(param.c_str());
    const pg::Result result = pg::exec(conn, sql, pointers);
    Rows rows(static_cast<std::size_t>(result.rows()));
    for (int row = 0; row < result.rows(); ++row) {
      for (int column = 0; column < PQnfields(result.get()); ++column) {
        rows[static_cast<std::size_t>(row)].push_back(
            result.is_null(row, column) ? Cell() : Cell(std::string(result.text(row, column))));
      }
    }
    return rows;
  };
}

TransactionStatus transaction_status(const Ask& ask, std::uint64_t transaction_id) {
  const std::string id = std::to_string(transaction_id);
  Rows asked;
  try {
    asked = ask("SELECT pg_xact_status($1::text::xid8)", {id});
  } catch (const DatabaseError& error) {
    // "transaction ID N is in the future": after a crash the server's next id is below an id it
    // handed out but never made durable, so that transaction did not commit (a committed one's
    // commit record is in the WAL, and recovery moves the next id past it).
    if (error.sqlstate() != "22023" ||
        std::string_view(error.what()).find("in the future") == std::string_view::npos) {
      throw;
    }
    // Not on a standby: there the id may be a commit not replayed yet.
    if (ask("SELECT pg_is_in_recovery()::text", {}).at(0).at(0) == "true") {
      throw InvalidArgument(
          "transaction_status: transaction " + id +
          " is not known to this server, a standby that may not have replayed it yet; ask the "
          "primary (a connection string with target_session_attrs=read-write)");
    }
    return TransactionStatus::aborted;
  }
  const Cell& status = asked.at(0).at(0);
  if (!status) return TransactionStatus::unknown;
  if (*status == "committed") return TransactionStatus::committed;
  if (*status == "aborted") return TransactionStatus::aborted;
  if (*status == "in progress") return TransactionStatus::in_progress;
  return TransactionStatus::unknown;
}

}  // namespace detail

namespace {

// ask_on(conn), each question in a savepoint when the caller's transaction block is open: an
// error (the "in the future" one above) then leaves the caller's transaction usable.
detail::Ask block_safe_ask(PGconn* conn) {
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_INTRANS) return detail::ask_on(conn);
  return [conn](const std::string& sql, const std::vector<std::string>& params) {
    pg::exec(conn, "SAVEPOINT outbox_transaction_status");
    try {
      detail::Rows rows = detail::ask_on(conn)(sql, params);
      pg::exec(conn, "RELEASE SAVEPOINT outbox_transaction_status");
      return rows;
    } catch (const DatabaseError&) {
      if (PQtransactionStatus(conn) == PQTRANS_INERROR) {
        pg::exec(conn, "ROLLBACK TO SAVEPOINT outbox_transaction_status");
        pg::exec(conn, "RELEASE SAVEPOINT outbox_transaction_status");
      }
      throw;
    }
  };
}

}  // namespace

TransactionStatus transaction_status(PGconn* conn, std::uint64_t transaction_id) {
  return detail::transaction_status(block_safe_ask(conn), transaction_id);
}

namespace {

// How far apart the clocks of the producer (which timed the UUIDv7) and PostgreSQL (which timed
// the cleanup's cutoff) may be before resolve_commit could mistake a deleted event for one that
// never committed.
constexpr std::int64_t kClockSkewMarginMs = 10 * 60 * 1000;

// The UUIDv7's creation time in Unix milliseconds (its first 48 bits), or -1 for another version
// (an id the caller made itself): then its age is unknown.
std::int64_t created_unix_ms(const EventId& id) {
  if (id.version() != 7) return -1;
  std::int64_t ms = 0;
  for (int i = 0; i < 6; ++i) ms = (ms << 8) | id.bytes()[static_cast<std::size_t>(i)];
  return ms;
}

// Once the transaction has ended: its event row exists if and only if it committed, unless
// retention cleanup deleted it after it was published. An event missing that may be older than
// the cleanup horizon (outbox_cleanup_horizon, raised by every deleting batch) is unknown: calling
// it aborted would make the caller run a committed transaction again.
TransactionStatus outcome_by_event(const detail::Ask& ask, const SchemaName& schema,
                                   const EventId& event_id) {
  const detail::Rows found =
      ask("SELECT (SELECT count(*) FROM " + schema.table("outbox_events") +
              " WHERE event_id = $1::uuid)::text,"
              " (SELECT (extract(epoch FROM deleted_before) * 1000)::bigint FROM " +
              schema.table("outbox_cleanup_horizon") + ")::text",
          {event_id.to_string()});
  if (found.at(0).at(0) != "0") return TransactionStatus::committed;
  // A table-less producer's event has no row whether or not it committed: in a schema with a slot
  // registered for table-less events a missing event says nothing.
  const std::string registrations = schema.table("outbox_table_less_slots");
  if (ask("SELECT (to_regclass($1) IS NOT NULL)::text", {registrations}).at(0).at(0) == "true" &&
      ask("SELECT count(*)::text FROM " + registrations, {}).at(0).at(0) != "0") {
    return TransactionStatus::unknown;
  }
  const detail::Cell& horizon = found.at(0).at(1);
  if (!horizon) return TransactionStatus::aborted;  // cleanup never deleted anything
  const std::int64_t created = created_unix_ms(event_id);
  if (created < 0 || created <= std::stoll(*horizon) + kClockSkewMarginMs) {
    return TransactionStatus::unknown;
  }
  return TransactionStatus::aborted;
}

}  // namespace

namespace detail {

TransactionStatus resolve_commit(const Ask& ask, const SchemaName& schema,
                                 std::uint64_t transaction_id, const EventId& event_id,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (transaction_status(ask, transaction_id) == TransactionStatus::in_progress) {
    if (std::chrono::steady_clock::now() >= deadline) return TransactionStatus::in_progress;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return outcome_by_event(ask, schema, event_id);
}

}  // namespace detail

TransactionStatus resolve_commit(PGconn* conn, const SchemaName& schema,
                                 std::uint64_t transaction_id, const EventId& event_id,
                                 std::chrono::milliseconds timeout) {
  return detail::resolve_commit(block_safe_ask(conn), schema, transaction_id, event_id, timeout);
}

TransactionStatus resolve_commit(PGconn* conn, const SchemaName& schema,
                                 const CommitOutcomeUnknown& error,
                                 std::chrono::milliseconds timeout) {
  if (error.event_ids().empty()) {
    throw InvalidArgument("resolve_commit: the error carries no event id to look for");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string pid = std::to_string(error.backend_pid());
  while (pg::exec(conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", {pid.c_str()})
             .int64(0, 0) > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return TransactionStatus::in_progress;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return outcome_by_event(block_safe_ask(conn), schema, error.event_ids().front());
}

}  // namespace outbox
