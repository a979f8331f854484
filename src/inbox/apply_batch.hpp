#pragma once
// What every inbox consumer (Kafka, NATS) does with a batch it took from its broker: apply it in
// one inbox transaction through the user's effect, and say whether a failure was the effect's.

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/health_board.hpp"
#include "outbox/consumed_event.hpp"
#include "outbox/inbox.hpp"

namespace outbox::detail {

struct BatchApplied {
  std::uint64_t applied = 0;     // effects run and committed
  std::uint64_t duplicates = 0;  // events the inbox had applied before
};

// Inbox::process_batch over `events`, calling `effect` for each one not applied before. When it
// throws, the exception propagates and `effect_threw` says whether the effect failed on a healthy
// connection (the effect's own fault) rather than the database (a lost connection, a deadlock);
// the caller's run() retries both, but reports them apart.
BatchApplied apply_through_inbox(const Inbox& inbox, PGconn* conn,
                                 const std::vector<ConsumedEvent>& events,
                                 const std::function<void(PGconn*, const ConsumedEvent&)>& effect,
                                 bool& effect_threw);

// A consumer's run(): calls `poll_once` until `stop`, between failures waiting a capped backoff
// from `backoff_base` to `backoff_max`, and says on `health` what failed: the effect (when
// `effect_threw` is set after a failure), PostgreSQL, the broker, or something no retry fixes
// (a ConfigError, a DatabaseError that is not retryable: rethrown, health stopped).
void run_until_stopped(HealthBoard& health, std::chrono::milliseconds backoff_base,
                       std::chrono::milliseconds backoff_max, const std::atomic<bool>& stop,
                       const bool& effect_threw, const std::function<void()>& poll_once);

}  // namespace outbox::detail
