#include "outbox/transaction.hpp"

#include <cstdint>
#include <optional>
#include <string_view>
#include <thread>

#include "common/fault.hpp"
#include "pg/connection.hpp"

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

TransactionStatus transaction_status(PGconn* conn, std::uint64_t transaction_id) {
  const std::string id = std::to_string(transaction_id);
  // Inside the caller's transaction block, a savepoint keeps the "in the future" error below from
  // aborting the caller's transaction (and the next question with it).
  const bool in_block = conn != nullptr && PQtransactionStatus(conn) == PQTRANS_INTRANS;
  if (in_block) pg::exec(conn, "SAVEPOINT outbox_transaction_status");
  std::optional<pg::Result> asked;
  try {
    asked.emplace(pg::exec(conn, "SELECT pg_xact_status($1::text::xid8)", {id.c_str()}));
    if (in_block) pg::exec(conn, "RELEASE SAVEPOINT outbox_transaction_status");
  } catch (const DatabaseError& error) {
    if (in_block && PQtransactionStatus(conn) == PQTRANS_INERROR) {
      pg::exec(conn, "ROLLBACK TO SAVEPOINT outbox_transaction_status");
      pg::exec(conn, "RELEASE SAVEPOINT outbox_transaction_status");
    }
    // "transaction ID N is in the future": after a crash the server's next id is below an id it
    // handed out but never made durable, so that transaction did not commit (a committed one's
    // commit record is in the WAL, and recovery moves the next id past it).
    if (error.sqlstate() == "22023" &&
        std::string_view(error.what()).find("in the future") != std::string_view::npos) {
      // Not on a standby: there the id may be a commit not replayed yet.
      if (pg::exec(conn, "SELECT pg_is_in_recovery()").text(0, 0) == "t") {
        throw InvalidArgument(
            "transaction_status: transaction " + id +
            " is not known to this server, a standby that may not have replayed it yet; ask the "
            "primary (a connection string with target_session_attrs=read-write)");
      }
      return TransactionStatus::aborted;
    }
    throw;
  }
  const pg::Result& result = *asked;
  if (result.is_null(0, 0)) return TransactionStatus::unknown;
  const std::string_view status = result.text(0, 0);
  if (status == "committed") return TransactionStatus::committed;
  if (status == "aborted") return TransactionStatus::aborted;
  if (status == "in progress") return TransactionStatus::in_progress;
  return TransactionStatus::unknown;
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
TransactionStatus outcome_by_event(PGconn* conn, const SchemaName& schema,
                                   const EventId& event_id) {
  const std::string id = event_id.to_string();
  const auto found =
      pg::exec(conn,
               "SELECT (SELECT count(*) FROM " + schema.table("outbox_events") +
                   " WHERE event_id = $1::uuid),"
                   " (SELECT (extract(epoch FROM deleted_before) * 1000)::bigint FROM " +
                   schema.table("outbox_cleanup_horizon") + ")",
               {id.c_str()});
  if (found.int64(0, 0) > 0) return TransactionStatus::committed;
  // A table-less producer's event has no row whether or not it committed: in a schema with a slot
  // registered for table-less events a missing event says nothing.
  const std::string registrations = schema.table("outbox_table_less_slots");
  if (pg::exec(conn, "SELECT (to_regclass($1) IS NOT NULL)::text", {registrations.c_str()})
              .text(0, 0) == "true" &&
      pg::exec(conn, "SELECT count(*) FROM " + registrations).int64(0, 0) > 0) {
    return TransactionStatus::unknown;
  }
  if (found.is_null(0, 1)) return TransactionStatus::aborted;  // cleanup never deleted anything
  const std::int64_t created = created_unix_ms(event_id);
  if (created < 0 || created <= found.int64(0, 1) + kClockSkewMarginMs) {
    return TransactionStatus::unknown;
  }
  return TransactionStatus::aborted;
}

}  // namespace

TransactionStatus resolve_commit(PGconn* conn, const SchemaName& schema,
                                 std::uint64_t transaction_id, const EventId& event_id,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (transaction_status(conn, transaction_id) == TransactionStatus::in_progress) {
    if (std::chrono::steady_clock::now() >= deadline) return TransactionStatus::in_progress;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return outcome_by_event(conn, schema, event_id);
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
  return outcome_by_event(conn, schema, error.event_ids().front());
}

}  // namespace outbox
