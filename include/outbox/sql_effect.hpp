#pragma once
// An inbox consumer's effect written in SQL, for a team with no C++ of its own: the statement the
// user names (`outbox consume --apply "SELECT app.apply_order_event($1)"`) runs in the inbox
// transaction with the event as one jsonb parameter. What $1 holds (docs/CONSUMING.md):
//   {"event_id": "…", "aggregate_type": "…", "aggregate_id": "…", "aggregate_sequence": 3,
//    "event_type": "…", "schema_version": 1, "payload": <the event's JSON>, "traceparent": "…",
//    "topic": "…", "partition": 0, "offset": 42}
// Whatever the statement does commits with the inbox record or not at all; when it raises, the
// consumer retries and (gap-aware) parks the event after park_failing_after failures.

#include <string>

#include "outbox/consumed_event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

class SqlEffect {
 public:
  // Throws InvalidArgument when `statement` is empty, names no $1, or names another parameter
  // ($2 …): it gets exactly one. The statement's text is scanned as a whole: a "$2" inside a
  // string literal or a comment counts too (write '$' || '2'), and a "$1" there is typed as jsonb.
  explicit SqlEffect(std::string statement);

  // Prepares the statement on `conn` (idle) and drops it again: a syntax error, a function that
  // does not exist or a missing privilege is found at start, not at the first event. Throws
  // ConfigError saying what PostgreSQL said and what to check.
  void check(PGconn* conn) const;

  // Runs the statement with `event` as $1. Throws InvalidArgument when the event's payload is not
  // JSON that jsonb takes (it cannot be handed over), DatabaseError when the statement fails.
  void operator()(PGconn* conn, const ConsumedEvent& event) const;

  // The jsonb text $1 gets for `event` (the payload's text as it came, unparsed).
  [[nodiscard]] static std::string event_json(const ConsumedEvent& event);

  [[nodiscard]] const std::string& statement() const noexcept { return statement_; }

 private:
  std::string statement_;
  std::string typed_;  // $1 as ($1::jsonb)
};

}  // namespace outbox
