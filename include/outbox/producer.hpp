#pragma once
// Enqueue events inside the caller's own PostgreSQL transaction.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

// The most one enqueue statement may carry: the events of one aggregate in one enqueue() or
// enqueue_and_commit() call go to PostgreSQL as one statement, and their payloads, headers and
// event types as sent (array literals, quotes escaped) may come to at most 64 MiB; more is
// InvalidArgument before anything is sent, saying to split the batch (several calls in the same
// transaction commit together just the same). Events of different aggregates are separate
// statements and do not add up. The real limits are PostgreSQL's: it closes the connection on a
// message of 1 GB or more (SQLSTATE 08006, retryable on its face, never succeeding) and refuses an
// array whose stored form passes 1 GB (54000); jsonb stores [1,1,...] in six times its text, so
// ~170 MB of such payloads already fail. 64 MiB keeps a sixteenth of the way below.
inline constexpr std::size_t kMaxEnqueueStatementBytes = 64 * 1024 * 1024;

struct ProducerOptions {
  SchemaName schema;
  // The largest message an event may become, counted as librdkafka counts a message against
  // its message.max.bytes: the key (aggregate_id), the value (the payload as PostgreSQL's jsonb
  // prints it, payload::text: a space after every comma and colon, one of repeated keys, escapes
  // decoded, numbers in full, so 1e999 counts 1000 bytes), every header's name and value with
  // their lengths (outbox's five included, the sequence at its longest) and 36 bytes of framing.
  // Larger is InvalidArgument. The default stays below librdkafka's message.max.bytes
  // (1,000,000), so an accepted event can also be published; set it to that property's value
  // when you change it.
  std::size_t max_payload_bytes = 900 * 1024;
  // Run the enqueue statement as a prepared statement, prepared once per connection (libpq
  // instance data remembers which): it is then not parsed and planned on every call, which costs
  // about as much as executing it. Turn off behind a transaction-mode pooler that does not track
  // prepared statements (PgBouncer before 1.21, or max_prepared_statements = 0); there a
  // statement prepared on one server connection is missing on the next.
  bool prepare_statements = true;
  // Table-less: write no outbox row. Each statement still takes the aggregate's next sequences
  // (the same row lock, the same gap-free numbers), and emits the events as one transactional
  // logical decoding message (pg_logical_emit_message(true, 'outbox:<schema>', ...)), which
  // commits or rolls back with the caller's transaction. Only a relay started with
  // `--source cdc --table-less` reads them, from its replication slot.
  //
  // What it gives up (docs/ARCHITECTURE.md, "Table-less producers"): the slot is then the only
  // copy of an event until the broker has it. A slot dropped or invalidated
  // (max_slot_wal_keep_size) before its relay has read an event loses that event, and replay lives
  // in the broker, not in the table. The producer refuses to write where that would be silent: it
  // checks that wal_level is logical and that a slot registered by a table-less relay exists with
  // its WAL (DatabaseError, SQLSTATE 55000, naming what to do), once per second per session (the
  // check costs as much as the rest of the statement), so within a second of a slot's loss
  // producers fail instead of writing events no one will read. resolve_commit() cannot tell a
  // table-less transaction's outcome from the outbox (there is no row to find): it answers
  // `unknown` for a missing event in a schema with a table-less slot registered; tell by the
  // transaction's business change.
  bool table_less = false;
};

struct EnqueuedEvent {
  EventId event_id;
  std::int64_t aggregate_sequence = 0;
  // The caller's transaction id: if the connection breaks during COMMIT (OutcomeUnknown), ask
  // transaction_status() with it on a new connection (see outbox/transaction.hpp).
  std::uint64_t transaction_id = 0;
};

// Writes outbox rows in the caller's transaction; never talks to a broker.
//
// Thread safety: a Producer is immutable after construction and may be shared by any number of
// threads. A PGconn must not be used by two threads at once (libpq's rule), so each thread passes
// its own connection.
class Producer {
 public:
  explicit Producer(ProducerOptions options = {});

  // Enqueues one event in the transaction open on `conn` (after BEGIN, before COMMIT) and
  // returns its id and per-aggregate sequence. The event commits or rolls back with the caller's
  // transaction: nothing is visible to the relay before the caller's COMMIT.
  //
  // Sequences: the next sequence of (aggregate_type, aggregate_id) is allocated under a row lock
  // held until the caller's transaction ends, so concurrent writers of one aggregate queue behind
  // each other and get consecutive, gap-free numbers in commit order. Writers of different
  // aggregates do not wait for each other.
  //
  // Blocks for one round trip (plus any wait for that aggregate's sequence lock).
  // Throws:
  //  - InvalidArgument when the event is malformed (empty names, names with control characters
  //    or not UTF-8, payload or headers not JSON or not storable as jsonb, schema_version < 1,
  //    too large as published) or `conn` is not inside an open transaction. Nothing was sent;
  //    the caller's transaction is untouched and still usable.
  //  - DatabaseError when PostgreSQL refuses (e.g. a duplicate event_id, missing migrations).
  //    The caller's transaction is then aborted and must be rolled back.
  EnqueuedEvent enqueue(PGconn* conn, const NewEvent& event) const;

  // Enqueues several events, in order: events of one aggregate get consecutive sequences in the
  // order given. Every event is validated before anything is sent. One round trip per distinct
  // aggregate. Same errors as above, and InvalidArgument when one aggregate's events pass
  // kMaxEnqueueStatementBytes (split the batch).
  std::vector<EnqueuedEvent> enqueue(PGconn* conn, std::span<const NewEvent> events) const;

  // Enqueues `events` and COMMITs the transaction open on `conn` in ONE round trip: the insert
  // statement(s) and the COMMIT go to the server together (libpq pipeline mode). Use it instead
  // of enqueue() + commit() when the events are the transaction's last statement: the event then
  // costs the transaction no round trip of its own, and the aggregate's sequence row stays
  // locked only through the commit, not while the caller finishes its work. Returns what
  // enqueue() returns, once committed.
  // Throws:
  //  - InvalidArgument: as enqueue(); nothing was sent, the transaction is open and usable.
  //  - DatabaseError: PostgreSQL refused an insert (the transaction is aborted: roll it back) or
  //    the COMMIT (the transaction is over); or the connection broke before the COMMIT left
  //    (retryable: nothing committed).
  //  - CommitOutcomeUnknown: the connection broke after the COMMIT was sent. Resolve it with
  //    resolve_commit(new_conn, schema, error) before running the transaction again.
  std::vector<EnqueuedEvent> enqueue_and_commit(PGconn* conn,
                                                std::span<const NewEvent> events) const;
  EnqueuedEvent enqueue_and_commit(PGconn* conn, const NewEvent& event) const;

  // Checks one event without any I/O; throws InvalidArgument naming the field and the rule.
  void validate(const NewEvent& event) const;

 private:
  ProducerOptions options_;
  std::string insert_many_sql_;  // an aggregate's events as arrays
  std::string insert_one_sql_;   // one event as plain parameters
};

}  // namespace outbox
