#pragma once
// "Did my COMMIT happen?" When the connection breaks while COMMIT is in flight, the transaction
// may have committed or not; the client cannot tell. Every enqueue returns the transaction's id
// (EnqueuedEvent::transaction_id, no extra round trip); keep it, and after an OutcomeUnknown ask
// PostgreSQL on a new connection. Retrying blindly could write the business change twice.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "outbox/error.hpp"
#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

// The connection broke after Producer::enqueue_and_commit sent its COMMIT. The transaction id
// usually never arrived (the server answers a pipeline at its end), so this carries what resolves
// it instead: the events' ids and the process id of the server session that ran the transaction.
class CommitOutcomeUnknown : public OutcomeUnknown {
 public:
  CommitOutcomeUnknown(const std::string& message, std::vector<EventId> event_ids, int backend_pid)
      : OutcomeUnknown(message), event_ids_(std::move(event_ids)), backend_pid_(backend_pid) {}
  [[nodiscard]] const std::vector<EventId>& event_ids() const noexcept { return event_ids_; }
  [[nodiscard]] int backend_pid() const noexcept { return backend_pid_; }

 private:
  std::vector<EventId> event_ids_;
  int backend_pid_;
};

enum class TransactionStatus {
  committed,    // both the business change and its events are durable
  aborted,      // neither happened: safe to run the whole transaction again
  in_progress,  // the server has not yet noticed the broken connection: ask again shortly
  unknown,      // the id is too old to look up (or from another cluster), or the event may
                // have been deleted by retention cleanup: the outcome can no longer be told
};

[[nodiscard]] const char* to_string(TransactionStatus status) noexcept;

// COMMITs the transaction open on `conn`. Throws OutcomeUnknown when the connection broke while
// the COMMIT was in flight (resolve it with transaction_status), DatabaseError when the server
// refused or rolled back instead (e.g. a statement in the transaction had failed).
void commit(PGconn* conn);

// The 64-bit id of the transaction open on `conn` (txid_current(); assigns one if needed).
// Throws InvalidArgument when no transaction is open, DatabaseError on failure.
std::uint64_t current_transaction_id(PGconn* conn);

// pg_xact_status of `transaction_id`, asked on `conn` (any healthy connection to the same
// cluster; not the broken one). Blocks for one round trip; inside an open transaction block, a
// few more (a savepoint keeps that transaction usable whatever the answer). Throws DatabaseError.
// Caveat: after a server crash, the id of a transaction that never committed can be handed out
// again (its WAL never reached disk), and then this reports the newer transaction's fate. Use
// resolve_commit() after a crash.
// An id the server has not reached yet (it handed it out, then crashed before making it durable)
// is aborted: that transaction did not commit.
TransactionStatus transaction_status(PGconn* conn, std::uint64_t transaction_id);

// The robust answer: waits (up to `timeout`) until `transaction_id` is no longer in progress,
// then looks for the event the transaction enqueued. The event row exists if and only if the
// transaction committed (events are immutable), unless retention cleanup has deleted it since:
// an event missing that is not clearly younger than the cleanup horizon (by its UUIDv7 time, with
// 10 minutes for clock skew; cleanup keeps at least an hour) is `unknown`, never `aborted`.
// Table-less producers (ProducerOptions::table_less) write no row: in a schema with a slot
// registered for table-less events a missing event is `unknown` too (tell by the transaction's
// own business change instead).
// Returns committed, aborted or unknown, or in_progress when `timeout` passed first. Throws
// DatabaseError.
TransactionStatus resolve_commit(PGconn* conn, const SchemaName& schema,
                                 std::uint64_t transaction_id, const EventId& event_id,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Resolves a lost enqueue_and_commit: waits (up to `timeout`) until the server session that ran
// the transaction (error.backend_pid()) has ended, after which its transaction can neither be in
// progress nor commit any more, then looks for its first event: present if and only if it
// committed (unknown when cleanup may have deleted it, as above). Returns committed, aborted or
// unknown, or in_progress when the session outlived `timeout`
// (a half-open connection the server has not noticed yet: `SELECT pg_terminate_backend(pid)`
// ends it, and the next call answers; a new session that reused the process id keeps it
// in_progress too, never wrong). Run on a new connection to the same server. Throws DatabaseError.
TransactionStatus resolve_commit(PGconn* conn, const SchemaName& schema,
                                 const CommitOutcomeUnknown& error,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace outbox
