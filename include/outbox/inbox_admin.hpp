#pragma once
// Operator actions on the events a gap-aware inbox holds (InboxOrdering, outbox/inbox.hpp):
// events that came before a predecessor, and events whose effect kept failing. Each holds its
// aggregate back at that consumer and nothing else. An operator releases one (apply it now,
// accepting any gap before it; a failed one is tried again) or skips it (its aggregate goes on
// as if it had been applied, without its effect). The decision is recorded here and in
// outbox_operator_audit; the consumer carries it out within a second or two of reading it
// (it runs the effect, which lives in the consumer's process).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

struct HeldEvent {
  std::string consumer_name;
  EventId event_id;
  std::string aggregate_type;
  std::string aggregate_id;
  std::int64_t aggregate_sequence = 0;
  std::string event_type;
  std::int32_t schema_version = 0;
  std::string kind;     // waiting (for a predecessor), failed, unknown_version
  bool parked = false;  // waiting past park_after, or failed / of an unknown version
  std::string reason;
  std::string held_at;
  std::string decision;    // "", or release / skip not yet carried out by the consumer
  std::string decided_by;  // who decided it
};

// Held events, parked first, then oldest first, of one consumer (or all when `consumer_name` is
// empty); at most `limit`. One query. Throws DatabaseError.
std::vector<HeldEvent> list_held(PGconn* conn, const SchemaName& schema,
                                 const std::string& consumer_name = {}, std::size_t limit = 1000);

// How many events each consumer holds: {consumer, waiting, parked}, by consumer name.
struct HeldCount {
  std::string consumer_name;
  std::int64_t waiting = 0;
  std::int64_t parked = 0;
};
std::vector<HeldCount> count_held(PGconn* conn, const SchemaName& schema);

enum class HeldDecision { release, skip };

// Records an operator's decision on a held event for the consumer to carry out, with who and
// why in outbox_operator_audit (a skip needs a reason: the effect never runs). `conn` must be
// idle; one transaction. Throws InvalidArgument (empty or hostile actor or reason; the event is
// not held by that consumer, or already has a decision: nothing changes) or DatabaseError.
void decide_held(PGconn* conn, const SchemaName& schema, const std::string& consumer_name,
                 const EventId& event_id, HeldDecision decision, const std::string& actor,
                 const std::string& reason);

}  // namespace outbox
