#include "inbox/apply_batch.hpp"

#include "common/backoff.hpp"
#include "outbox/error.hpp"

namespace outbox::detail {

BatchApplied apply_through_inbox(const Inbox& inbox, PGconn* conn,
                                 const std::vector<ConsumedEvent>& events,
                                 const std::function<void(PGconn*, const ConsumedEvent&)>& effect,
                                 bool& effect_threw) {
  effect_threw = false;
  std::vector<EventId> ids;
  ids.reserve(events.size());
  for (const auto& event : events) ids.push_back(event.event_id);
  const auto results = inbox.process_batch(conn, ids, [&](PGconn* c, std::size_t i) {
    try {
      effect(c, events[i]);
    } catch (const DatabaseError& error) {
      // A lost connection or a deadlock is the database's trouble, anything else the effect's.
      effect_threw = !error.retryable() && PQstatus(c) == CONNECTION_OK;
      throw;
    } catch (...) {
      effect_threw = PQstatus(c) == CONNECTION_OK;
      throw;
    }
  });
  BatchApplied counts;
  for (const InboxResult result : results) {
    ++(result == InboxResult::applied ? counts.applied : counts.duplicates);
  }
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
