#pragma once
// "Did my COMMIT happen?" When the connection breaks while COMMIT is in flight, the transaction
// may have committed or not; the client cannot tell. Every enqueue returns the transaction's id
// (EnqueuedEvent::transaction_id, no extra round trip); keep it, and after an OutcomeUnknown ask
// PostgreSQL on a new connection. Retrying blindly could write the business change twice.

#include <chrono>
#include <cstdint>
#include <string>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

enum class TransactionStatus {
  committed,    // both the business change and its events are durable
  aborted,      // neither happened: safe to run the whole transaction again
  in_progress,  // the server has not yet noticed the broken connection: ask again shortly
  unknown,      // the id is too old to look up (or from another cluster)
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
// cluster; not the broken one). Blocks for one round trip. Throws DatabaseError.
// Caveat: after a server crash, the id of a transaction that never committed can be handed out
// again (its WAL never reached disk), and then this reports the newer transaction's fate. Use
// resolve_commit() after a crash.
TransactionStatus transaction_status(PGconn* conn, std::uint64_t transaction_id);

// The robust answer: waits (up to `timeout`) until `transaction_id` is no longer in progress,
// then looks for the event the transaction enqueued. The event row exists if and only if the
// transaction committed (events are immutable; cleanup removes only published rows past the
// replay horizon, so resolve soon after the failure). Returns committed or aborted, or
// in_progress when `timeout` passed first. Throws DatabaseError.
TransactionStatus resolve_commit(PGconn* conn, const SchemaName& schema,
                                 std::uint64_t transaction_id, const EventId& event_id,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace outbox
