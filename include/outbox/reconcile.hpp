#pragma once
// Events in doubt: sent with no answer (a timeout, a reset) to a destination that cannot
// recognise a repeat (the HTTP sink with --http-on-unknown reconcile). Sending one again could
// make its effect twice, so no relay does: it waits, its aggregate behind it, until it is settled
// here, by what the destination says (`outbox reconcile check --status-url`) or an operator's
// decision, each audited in outbox_operator_audit (reconcile_published, reconcile_retry,
// reconcile_skip).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

struct InDoubtEvent {
  Event event;                      // as a relay would send it (payload and headers: if asked)
  std::string in_doubt_at;          // when the relay parked it
  double age_seconds = 0;           // how long ago that was
  std::string reason;               // what the sink saw ("no status after the request was sent")
  std::int64_t blocked_events = 0;  // later events of the same aggregate waiting behind it
};

// Oldest first, at most `limit`; with `with_body` the payload and headers too. Blocks for one
// query. Throws DatabaseError.
std::vector<InDoubtEvent> list_in_doubt(PGconn* conn, const SchemaName& schema,
                                        std::size_t limit = 1000, bool with_body = true);

enum class Settlement {
  published,  // it happened at the destination: marked published, its aggregate moves on
  retry,      // it did not: due again, a relay sends it (a fresh attempt budget)
  skip,       // it is not to happen: finished unpublished, its aggregate moves on
};
[[nodiscard]] const char* to_string(Settlement settlement) noexcept;

// Settles those of `event_ids` that are in doubt, and records each with `actor` and `reason`
// (both required: the record says who decided and on what ground). Ids not in doubt (any more)
// are left alone. Returns the ids settled. `conn` must be idle; one transaction. Throws
// InvalidArgument (empty or hostile actor or reason) or DatabaseError.
std::vector<EventId> settle_in_doubt(PGconn* conn, const SchemaName& schema,
                                     std::span<const EventId> event_ids, Settlement settlement,
                                     const std::string& actor, const std::string& reason);

// Why each of `event_ids` is not in doubt, one line per such id in the order given ("not
// found", "published at T", "skipped at T", "pending, not in doubt"). Blocks for one query.
std::vector<std::string> not_in_doubt(PGconn* conn, const SchemaName& schema,
                                      std::span<const EventId> event_ids);

}  // namespace outbox
