#include "inbox/apply_batch.hpp"

#include "common/backoff.hpp"
#include "outbox/error.hpp"

namespace outbox::detail {

InboxApplier::Effect InboxApplier::watched(const Effect& effect, bool& effect_threw,
                                           EventId& failed) {
  return [&effect, &effect_threw, &failed](PGconn* c, const ConsumedEvent& event) {
    try {
      effect(c, event);
    } catch (const DatabaseError& error) {
      // A lost connection or a deadlock is the database's trouble, anything else the effect's.
      effect_threw = !error.retryable() && PQstatus(c) == CONNECTION_OK;
      if (effect_threw) failed = event.event_id;
      throw;
    } catch (...) {
      effect_threw = PQstatus(c) == CONNECTION_OK;
      if (effect_threw) failed = event.event_id;
      throw;
    }
  };
}

void InboxApplier::remember_failure(const EventId& id, const std::string& what) {
  if (id.is_nil()) return;
  Failures& failures = failures_[id];
  ++failures.count;
  failures.last = what;
}

InboxApplier::Effect InboxApplier::upcasting(const Effect& effect) const {
  if (upcasters_.empty()) return effect;
  return [this, &effect](PGconn* c, const ConsumedEvent& event) {
    ConsumedEvent current = event;
    upcasters_.upcast(current, c);  // throws for a version it cannot reach: never applied
    effect(c, current);
  };
}

BatchApplied InboxApplier::apply(PGconn* conn, const std::vector<ConsumedEvent>& events,
                                 const Effect& effect, bool& effect_threw) {
  effect_threw = false;
  EventId failed;
  const Effect user = upcasting(effect);
  const Effect each = watched(user, effect_threw, failed);
  BatchApplied counts;
  try {
    if (!inbox_.ordering().enabled) {
      std::vector<EventId> ids;
      ids.reserve(events.size());
      for (const auto& event : events) ids.push_back(event.event_id);
      const auto results =
          inbox_.process_batch(conn, ids, [&](PGconn* c, std::size_t i) { each(c, events[i]); });
      for (const InboxResult result : results) {
        ++(result == InboxResult::applied ? counts.applied : counts.duplicates);
      }
      return counts;
    }
    std::map<EventId, ParkRequest> park;
    for (const ConsumedEvent& event : events) {
      if (std::string why = upcasters_.unknown(event); !why.empty()) {
        park[event.event_id] = {std::move(why), /*unknown_version=*/true};
      }
    }
    const int limit = inbox_.ordering().park_failing_after;
    for (const auto& [id, failures] : failures_) {
      if (limit > 0 && failures.count >= limit) {
        park[id] = {"its effect failed " + std::to_string(failures.count) +
                    " times in a row; the last error: " + failures.last};
      }
    }
    const OrderedBatchResult result = inbox_.process_in_order(conn, events, each, park);
    counts.applied = result.applied_from_held;
    counts.decided = result.decided;
    for (const InboxResult r : result.results) {
      if (r == InboxResult::applied) ++counts.applied;
      if (r == InboxResult::duplicate) ++counts.duplicates;
      if (r == InboxResult::held) ++counts.held;
    }
    counts.parked = result.parked.size();  // held rows parked in place count too
    for (const EventId& id : result.parked) failures_.erase(id);
    if (counts.parked > 0 || counts.held > 0) next_tend_ = {};  // the gauges show it at once
    return counts;
  } catch (const std::exception& error) {
    if (effect_threw) remember_failure(failed, error.what());
    throw;
  }
}

BatchApplied InboxApplier::carry_out(PGconn* conn, const Effect& effect, bool& effect_threw) {
  effect_threw = false;
  EventId failed;
  const Effect user = upcasting(effect);
  const OrderedBatchResult result =
      inbox_.carry_out_decisions(conn, watched(user, effect_threw, failed));
  BatchApplied counts;
  counts.applied = result.applied_from_held;
  counts.decided = result.decided;
  return counts;
}

void run_until_stopped(HealthBoard& health, std::chrono::milliseconds backoff_base,
                       std::chrono::milliseconds backoff_max, const std::atomic<bool>& stop,
                       const bool& effect_threw, const std::function<void()>& poll_once) {
  Backoff backoff(backoff_base, backoff_max);
  health.set(Health::running);
  while (!stop.load()) {
    try {
      poll_once();
      backoff.reset();
      if (health.health() != Health::running) health.set(Health::running);
      continue;
    } catch (const DatabaseError& error) {
      if (effect_threw) {
        health.set(Health::effect_failing, error.what());
      } else if (error.retryable()) {
        health.set(Health::database_unavailable, error.what());
      } else {
        health.set(Health::stopped, error.what());
        throw;
      }
    } catch (const ConfigError& error) {
      health.set(Health::stopped, error.what());
      throw;
    } catch (const BrokerError& error) {
      health.set(Health::broker_unavailable, error.what());
    } catch (const std::exception& error) {
      health.set(Health::effect_failing, error.what());
    }
    backoff.wait([&stop] { return stop.load(); });
  }
  health.set(Health::stopped);
}

}  // namespace outbox::detail
