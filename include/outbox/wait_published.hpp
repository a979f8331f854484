#pragma once
// Answer after publish: for a caller that must reply only once its events are out (an API whose
// client reads the event's effect elsewhere right after the answer), a wait, after COMMIT, until
// the relay has marked them published: the destination acknowledged each (Kafka acks=all, a
// JetStream PubAck, a RabbitMQ confirm, a Redis reply, an HTTP 2xx). Optional: the outbox's
// guarantee holds without it, and it adds the relay's commit→publish latency to the caller's
// answer (docs/PRODUCING.md, "Answer after publish", measured by `outbox-dev bench --only
// answer`). Events made table-less (no row) cannot be waited for.

#include <chrono>
#include <span>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

struct PublishWait {
  std::vector<EventId> published;
  std::vector<EventId> waiting;  // still pending when the time ran out
  // Quarantined, skipped or in doubt: no relay publishes them without an operator, so the wait
  // ends at once for them (outbox quarantine, outbox reconcile).
  std::vector<EventId> stopped;
  std::vector<EventId> not_found;  // no such row: never committed, or cleaned up long after
  std::uint64_t polls = 0;         // queries it ran
  [[nodiscard]] bool all_published() const {
    return waiting.empty() && stopped.empty() && not_found.empty();
  }
};

struct WaitOptions {
  std::chrono::milliseconds timeout{5000};
  // Polls by primary key, first after `first_poll`, each wait doubled up to `max_poll`.
  std::chrono::milliseconds first_poll{2};
  std::chrono::milliseconds max_poll{100};
};

// Polls the events' rows until each is published, stopped or gone, or the timeout passes.
// `conn` must be idle (after COMMIT; a row the caller's own open transaction wrote would never
// be seen by a relay). Needs SELECT on outbox_events' state columns (the writer role has it).
// Throws InvalidArgument (busy connection, nil id, bad options) or DatabaseError.
PublishWait wait_published(PGconn* conn, const SchemaName& schema,
                           std::span<const EventId> event_ids, const WaitOptions& options = {});

}  // namespace outbox
