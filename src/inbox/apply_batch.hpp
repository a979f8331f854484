#pragma once
// What every inbox consumer (Kafka, NATS) does with a batch it took from its broker: apply it in
// one inbox transaction through the user's effect, and say whether a failure was the effect's.

#include <libpq-fe.h>

#include <cstdint>
#include <functional>
#include <vector>

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

}  // namespace outbox::detail
