#pragma once
// Exactly-once effects for at-least-once delivery: the dedup record and the effect commit in one
// PostgreSQL transaction.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "outbox/consumed_event.hpp"
#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

enum class InboxResult {
  applied,    // first time this consumer saw the event: the effect ran and committed
  duplicate,  // already processed (or being processed by a twin that committed): no effect
  held,       // gap-aware: a predecessor is missing; kept in inbox_parked, applied after it
  parked,     // gap-aware: its effect failed too often; kept in inbox_parked, its aggregate waits
};

// Per-aggregate order at the consumer (the gap-aware inbox; docs/CONSUMING.md). Off, the inbox
// deduplicates by event id only and applies what arrives in the order it arrives.
struct InboxOrdering {
  // On: per aggregate, the inbox remembers the highest applied sequence (inbox_aggregates). The
  // next one is applied; a repeat (by id, or by a sequence already applied: the rewind k, k+1, k)
  // is suppressed; one that skips ahead is held in inbox_parked (the broker's ack moves on: the
  // inbox keeps it, in the same transaction) and applied in the transaction that applies its
  // missing predecessor. Never applied out of order.
  bool enabled = false;
  // A held event still waiting after this long is reported parked: counted in the consumer's
  // `outbox_consumer_events_parked` gauge (alert OutboxConsumerEventsParked) and listed by
  // `outbox inbox list`, where an operator can release it (apply it now, accepting the gap) or
  // skip it. It stays held meanwhile, and still applies if the missing event comes.
  std::chrono::milliseconds park_after{std::chrono::minutes(5)};
  // An aggregate this consumer never applied starts at the lowest sequence its first batch holds
  // instead of at 1: for a consumer that joins a history that has begun (a topic whose early
  // messages are gone, an inbox that was deduplicating before ordering was turned on). Off, its
  // first event must be sequence 1.
  bool start_at_first_seen = false;
  // The consumers' run(): an event whose effect threw this many times in a row is parked
  // ('failed', with the error) so that the other aggregates go on; its own aggregate waits behind
  // it until an operator releases or skips it. 0: retried forever, as without ordering.
  int park_failing_after = 10;
};

// Why an event is parked instead of applied (Inbox::process_in_order's `park`).
struct ParkRequest {
  std::string reason;
  bool unknown_version = false;  // kind 'unknown_version' (else 'failed')
};

// What a gap-aware batch did (Inbox::process_in_order).
struct OrderedBatchResult {
  std::vector<InboxResult> results;     // per input event, in input order
  std::uint64_t applied_from_held = 0;  // held events applied (their gap closed, or released)
  std::uint64_t decided = 0;            // held events released or skipped by an operator
  std::vector<EventId> parked;          // events parked by this batch (fresh and held ones)
};

// Thread safety: immutable after construction, shareable; each thread uses its own PGconn.
class Inbox {
 public:
  // `consumer_name` scopes the dedup records: two consumers of one event each apply it once.
  // Throws InvalidArgument when it is empty or longer than 255 bytes, or `ordering` is out of
  // range (park_after negative, park_failing_after negative).
  Inbox(SchemaName schema, std::string consumer_name, InboxOrdering ordering = {});

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

  using Effect = std::function<void(PGconn*, const ConsumedEvent&)>;

  // The gap-aware batch (ordering.enabled; throws InvalidArgument otherwise): one transaction
  // that deduplicates by id, locks the batch's aggregates, and per aggregate applies in sequence
  // order what is next (with any held events the batch's events let through), suppresses what is
  // already applied, and holds what skips ahead. `park` names events to park instead of applying
  // them (kind 'failed', with the given reason): the consumers' run() fills it from the effects
  // that failed park_failing_after times. Same connection rules, atomicity and errors as
  // process_batch(); an event's aggregate_sequence must be positive.
  // `unknown_version` (optional) says why an event cannot be brought to the version the effect
  // is written for (Upcasters::unknown): such an event, fresh or held, is parked as
  // 'unknown_version' when it would be applied.
  using UnknownVersion = std::function<std::string(const ConsumedEvent&)>;
  OrderedBatchResult process_in_order(PGconn* conn, std::span<const ConsumedEvent> events,
                                      const Effect& effect,
                                      const std::map<EventId, ParkRequest>& park = {},
                                      const UnknownVersion& unknown_version = {}) const;

  // Carries out operators' decisions on this consumer's parked events (`outbox inbox release`,
  // `skip`): up to 100 aggregates with a decision no undecided parked row holds back, in one
  // transaction, each with what its decision lets through (held events below a decision first).
  // `park` and `unknown_version` as process_in_order's. When an effect throws, the transaction
  // is rolled back and the exception propagates; when it was the decided event's own effect and
  // not a retryable database error, its decision is withdrawn and its reason says so (no retry
  // loop: an operator decides again).
  // Returns what it did (`results` empty: no batch). Needs ordering.enabled.
  OrderedBatchResult carry_out_decisions(PGconn* conn, const Effect& effect,
                                         const std::map<EventId, ParkRequest>& park = {},
                                         const UnknownVersion& unknown_version = {}) const;

  // This consumer's held events: how many still wait, how many are parked (waited past
  // park_after, failed, or of an unknown version). One indexed count.
  struct Waiting {
    std::uint64_t waiting = 0;
    std::uint64_t parked = 0;
  };
  [[nodiscard]] Waiting waiting(PGconn* conn) const;

  [[nodiscard]] const std::string& consumer_name() const noexcept { return consumer_name_; }
  [[nodiscard]] const InboxOrdering& ordering() const noexcept { return ordering_; }
  [[nodiscard]] const SchemaName& schema() const noexcept { return schema_; }

 private:
  SchemaName schema_;
  std::string consumer_name_;
  InboxOrdering ordering_;
  std::string insert_sql_;
  std::string insert_batch_sql_;
};

}  // namespace outbox
