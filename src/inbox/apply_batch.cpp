#include "inbox/apply_batch.hpp"

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

}  // namespace outbox::detail
