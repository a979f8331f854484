#pragma once
// Exactly-once effects for at-least-once delivery: the dedup record and the effect commit in one
// PostgreSQL transaction.

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

enum class InboxResult {
  applied,    // first time this consumer saw the event: the effect ran and committed
  duplicate,  // already processed (or being processed by a twin that committed): no effect
};

// Thread safety: immutable after construction, shareable; each thread uses its own PGconn.
class Inbox {
 public:
  // `consumer_name` scopes the dedup records: two consumers of one event each apply it once.
  // Throws InvalidArgument when it is empty or longer than 255 bytes.
  Inbox(SchemaName schema, std::string consumer_name);

  // Runs BEGIN; INSERT INTO processed_events ... ON CONFLICT DO NOTHING RETURNING; the effect
  // (only when the insert returned a row); COMMIT. `conn` must be idle (no open transaction).
  //
  // If a twin consumer holds the same event in an open transaction, the insert waits for it:
  // when the twin commits this call returns duplicate; when the twin rolls back this one applies.
  // When `effect` throws, the transaction is rolled back (no dedup record, no effect) and the
  // exception propagates: the event can be processed again.
  // Throws DatabaseError; OutcomeUnknown when the connection breaks during COMMIT (a redelivery
  // is then safe: it is either applied once or found duplicate).
  InboxResult process(PGconn* conn, const EventId& event_id,
                      const std::function<void(PGconn*)>& effect) const;

  // Processes several events in ONE transaction: one dedup insert for all of them, `effect(conn,
  // i)` for each event i not processed before (in the given order; an id repeated within the batch
  // counts once), one COMMIT. All or nothing: when an effect throws, nothing of the batch is
  // committed and the exception propagates. Returns the result per event, in input order.
  // Same connection rules and errors as process(). One fsync per batch instead of per event.
  std::vector<InboxResult> process_batch(
      PGconn* conn, std::span<const EventId> event_ids,
      const std::function<void(PGconn*, std::size_t index)>& effect) const;

  [[nodiscard]] const std::string& consumer_name() const noexcept { return consumer_name_; }

 private:
  SchemaName schema_;
  std::string consumer_name_;
  std::string insert_sql_;
  std::string insert_batch_sql_;
};

}  // namespace outbox
