#pragma once
// Operator actions on quarantined events: an event that failed permanently (too large, unknown
// topic, not authorised) or used up its attempts. It blocks later events of its own aggregate and
// nothing else, until an operator retries it (after fixing the cause) or skips it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

struct QuarantinedEvent {
  EventId event_id;
  std::string aggregate_type;
  std::string aggregate_id;
  std::int64_t aggregate_sequence = 0;
  std::string event_type;
  std::int32_t attempt_count = 0;
  std::string reason;      // "permanent failure" or "gave up after N attempts"
  std::string last_error;  // the broker's last answer
  std::string quarantined_at;
  std::int64_t blocked_events = 0;  // later events of the same aggregate waiting behind it
};

// Oldest first, at most `limit`. Blocks for one query. Throws DatabaseError.
std::vector<QuarantinedEvent> list_quarantined(PGconn* conn, const SchemaName& schema,
                                               std::size_t limit = 1000);

// Makes quarantined events due again with a fresh attempt budget, and records who did it.
// Events not quarantined (any more) are left alone. Returns how many were released, and when
// `released` is given, which (in no particular order).
// `conn` must be idle; runs one transaction. Throws InvalidArgument (empty actor, or one with a
// control character, a bidirectional override or bytes that are not UTF-8) or DatabaseError.
std::size_t retry_quarantined(PGconn* conn, const SchemaName& schema,
                              std::span<const EventId> event_ids, const std::string& actor,
                              std::vector<EventId>* released = nullptr);

// Why each of `event_ids` is not (or no longer) quarantined, one line per such id in the order
// given: "not found", "published at T", "skipped at T", "pending, not quarantined". Ids that are
// quarantined are left out. For an operator whose retry released fewer events than named.
// Blocks for one query. Throws DatabaseError.
std::vector<std::string> not_quarantined(PGconn* conn, const SchemaName& schema,
                                         std::span<const EventId> event_ids);

// Finishes a quarantined event without publishing it, so its aggregate moves on, and records
// who did it and why (the reason is required). `conn` must be idle; one transaction.
// Throws InvalidArgument when the reason or actor is empty or the event is not quarantined
// (nothing is changed then), DatabaseError otherwise.
void skip_quarantined(PGconn* conn, const SchemaName& schema, const EventId& event_id,
                      const std::string& actor, const std::string& reason);

}  // namespace outbox
