#pragma once
// What every inbox consumer (Kafka, NATS) does with a batch it took from its broker: apply it in
// one inbox transaction through the user's effect, and say whether a failure was the effect's.

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/health_board.hpp"
#include "outbox/consumed_event.hpp"
#include "outbox/inbox.hpp"
#include "outbox/upcaster.hpp"

namespace outbox::detail {

struct BatchApplied {
  std::uint64_t applied = 0;     // effects run and committed (held ones let through included)
  std::uint64_t duplicates = 0;  // events the inbox had applied before
  std::uint64_t held = 0;        // gap-aware: kept, waiting for a predecessor
  std::uint64_t parked = 0;      // gap-aware: parked after park_failing_after failed attempts
  std::uint64_t decided = 0;     // gap-aware: operators' releases and skips carried out
  std::uint64_t rejected = 0;    // gap-aware: messages it cannot order (no sequence, not text)
};

// Adds a batch's counts to a consumer's counters.
template <typename Counters>
void count_batch(Counters& counters, const BatchApplied& counts) {
  counters.applied += counts.applied;
  counters.duplicates += counts.duplicates;
  counters.held += counts.held;
  counters.effects_parked += counts.parked;
  counters.decisions_carried_out += counts.decided;
  counters.rejected += counts.rejected;
}

// Every consumer's way into its Inbox: a batch through it, and between batches what a gap-aware
// inbox needs besides (operators' decisions, the gauges of held events). One per consumer,
// used by its polling thread.
class InboxApplier {
 public:
  using Effect = Inbox::Effect;
  InboxApplier(SchemaName schema, std::string consumer_name, InboxOrdering ordering,
               Upcasters upcasters = {})
      : inbox_(std::move(schema), std::move(consumer_name), ordering),
        upcasters_(std::move(upcasters)) {}

  // The batch through Inbox::process_batch, or process_in_order when the inbox is gap-aware
  // (parking an event whose effect failed park_failing_after times in a row). When it throws,
  // the exception propagates and `effect_threw` says whether the effect failed on a healthy
  // connection (the effect's own fault) rather than the database (a lost connection, a
  // deadlock); the caller's run() retries both, but reports them apart.
  BatchApplied apply(PGconn* conn, const std::vector<ConsumedEvent>& events, const Effect& effect,
                     bool& effect_threw);

  // Gap-aware only, at most once a second: carries out operators' decisions and refreshes the
  // held-event gauges of `counters` (any consumer's, by the fields OUTBOX_CONSUMER_STATS names).
  template <typename Counters>
  void tend(PGconn* conn, const Effect& effect, Counters& counters, bool& effect_threw) {
    if (!inbox_.ordering().enabled || std::chrono::steady_clock::now() < next_tend_) return;
    next_tend_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    count_batch(counters, carry_out(conn, effect, effect_threw));
    const Inbox::Waiting waiting = inbox_.waiting(conn);
    counters.events_waiting.store(waiting.waiting);
    counters.events_parked.store(waiting.parked);
  }

  [[nodiscard]] const Inbox& inbox() const noexcept { return inbox_; }

 private:
  BatchApplied carry_out(PGconn* conn, const Effect& effect, bool& effect_threw);
  // The effect as the inbox calls it, noting which event threw and whose fault it was.
  Effect watched(const Effect& effect, bool& effect_threw, EventId& failed);
  void remember_failure(const EventId& id, const std::string& what);

  // The effect as the user wrote it, given each event at the version it is written for.
  Effect upcasting(const Effect& effect) const;
  // Events whose effect failed park_failing_after times in a row, with the last error.
  std::map<EventId, ParkRequest> to_park() const;
  Inbox::UnknownVersion unknown_version() const;

  Inbox inbox_;
  Upcasters upcasters_;
  struct Failures {
    int count = 0;
    std::string last;
  };
  std::map<EventId, Failures> failures_;  // consecutive failed attempts by event
  std::chrono::steady_clock::time_point next_tend_{};
};

// A consumer's run(): calls `poll_once` until `stop`, between failures waiting a capped backoff
// from `backoff_base` to `backoff_max`, and says on `health` what failed: the effect (when
// `effect_threw` is set after a failure), PostgreSQL, the broker, or something no retry fixes
// (a ConfigError, a DatabaseError that is not retryable: rethrown, health stopped).
void run_until_stopped(HealthBoard& health, std::chrono::milliseconds backoff_base,
                       std::chrono::milliseconds backoff_max, const std::atomic<bool>& stop,
                       const bool& effect_threw, const std::function<void()>& poll_once);

}  // namespace outbox::detail
