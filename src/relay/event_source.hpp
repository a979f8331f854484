#pragma once
// The two seams of the relay loop (relay.cpp): where events come from (an EventSource) and where
// their outcomes go (a CompletionRecorder). The loop owns the send window and the sink and
// decides when to fetch, wait and record; a source knows nothing of sinks, a sink nothing of
// PostgreSQL.
//
// Two implementations: the polling claim (PollingSource, polling_source.hpp: a claim statement
// takes pending heads under a lease, a mark writes the outcome matching the claim's token), and
// change data capture (CdcSource, relay/cdc/cdc_source.hpp: reads the outbox inserts from a
// replication slot, marks the rows it streamed, and confirms a slot position once every event
// before it is recorded; a PollingSource is its table path). The loop (relay/loop/relay.cpp)
// builds one of them and knows neither.
//
// Errors: DatabaseError (retryable or not) from any call; the loop reconnects through
// reconnect() and carries on.

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "relay/send_window.hpp"

namespace outbox::detail {

// An event to send and the completion token its outcome is recorded with (none when unclaimed).
struct SourcedEvent {
  Event event;
  std::string token;
  Origin origin = Origin::claimed;
  // Claimed from a session that ended or whose lease ran out while it held the event, with no
  // outcome written: that session may have sent it.
  bool taken_over = false;
};

struct Fetched {
  std::vector<SourcedEvent> events;
  bool reached_end = true;  // nothing more is ready after these (else fetch again at once)
  // The fetch began part way through the ready events (after a cursor): those before it were not
  // looked at, so when it reached the end a fetch from the start may still find some.
  bool began_mid_way = false;
  // The next ready event did not fit the byte room: it needs this many bytes (0: none waits).
  std::uint64_t waiting_bytes = 0;
};

// The sockets a source's fetch() may have news on (news_sockets()); -1 where none.
using NewsSockets = std::array<int, 4>;

class EventSource {
 public:
  virtual ~EventSource() = default;

  // Up to `limit` ready events whose payload and header bytes fit `byte_room`; with
  // `holding_nothing`, one event larger than that may come alone. Within an aggregate, an event
  // comes only once its predecessor is recorded as published (or it never comes).
  virtual Fetched fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) = 0;

  // Waits at most `timeout` for a sign that new events are ready (0: only looks); true if one
  // came. A source that has nothing to wait on sleeps.
  virtual bool wait_for_news(std::chrono::milliseconds timeout) = 0;
  // Whether the news wait_for_news() last reported may wait for the next fetch the loop paces
  // under heavy live traffic (ClaimSchedule) instead of asking for one at once: a change stream's
  // few new transactions. A NOTIFY never may (the default), nor a stream catching up, nor a
  // mark's answer that made an aggregate's next event ready.
  [[nodiscard]] virtual bool news_may_wait() const { return false; }

  // Sockets whose readability is news for fetch() (a change stream, the answer to a statement
  // sent without waiting), or -1. While the loop waits for broker reports with room to send, it
  // wakes for these too (Sink::wake_fd); none while fetch() would not read them.
  [[nodiscard]] virtual NewsSockets news_sockets() const {
    NewsSockets none;
    none.fill(-1);
    return none;
  }

  // Duties due by `now` (heartbeats, looking for dead peers, keeping the in-flight events'
  // claims alive); true when they made new events ready (fetch at once).
  virtual bool run_duties(std::chrono::steady_clock::time_point now, const SendWindow& window) = 0;
  // When the next duty is due: an idle loop sleeps no longer.
  [[nodiscard]] virtual std::chrono::steady_clock::time_point next_duty() const = 0;

  // Whether producers must announce new events (the loop is going to sleep: true) or the loop
  // looks by itself (false). The first call after reconnect() registers the loop again.
  virtual void set_listening(bool listening) = 0;
  [[nodiscard]] virtual bool listening() const = 0;

  // After a DatabaseError: a new connection when the old one is gone (true if it made one), then
  // whatever keeps the events in `window` this relay's (polling: renews their leases; on a new
  // connection moves their claims to the new session, and their tokens in `window` with them).
  virtual bool reconnect(SendWindow& window) = 0;
  // The loop stops: it no longer counts among the live relays. Never throws.
  virtual void leave() noexcept = 0;
};

class CompletionRecorder {
 public:
  virtual ~CompletionRecorder() = default;

  // Writes `published` (outcomes of acknowledged sends). May hand back successors that became
  // ready by it, fetched within `successor_bytes` (none when `take_successors` is false); the
  // loop sends them like fetched events. Clears `published` once written; on an exception it
  // stays whole for the next call (writing an outcome again changes nothing).
  virtual std::vector<SourcedEvent> record_published(std::vector<Outcome>& published,
                                                     bool take_successors,
                                                     std::uint64_t successor_bytes) = 0;
  // Writes `failed` (retry later, or quarantine a permanent or last failure). Same contract.
  virtual void record_failed(std::vector<Outcome>& failed) = 0;
};

// Both seams in one object, as a relay runs over them: PollingSource, CdcSource.
class RelaySourceBase : public EventSource, public CompletionRecorder {};

}  // namespace outbox::detail
