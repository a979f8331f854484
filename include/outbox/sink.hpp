#pragma once
// The seam every destination (Kafka, NATS, RabbitMQ, Redis, HTTP) plugs into.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/stats.hpp"

namespace outbox {

enum class DeliveryOutcome {
  published,          // the broker acknowledged durable receipt
  retryable_failure,  // refused for now (broker down, timeout, throttled): try again later
  permanent_failure,  // will never succeed as it stands (too large, unknown topic, not authorised)
  unknown,            // may or may not have been persisted: treated as not published, sent again
  // May or may not have happened, at a destination that cannot recognise a repeat: never sent
  // again by itself. The event waits in doubt (in_doubt_at), its aggregate behind it, until
  // `outbox reconcile` settles it. Only the HTTP sink with HttpOnUnknown::reconcile reports it.
  in_doubt,
};

[[nodiscard]] const char* to_string(DeliveryOutcome outcome) noexcept;

// An asynchronous delivery result: a value, never an exception.
struct DeliveryReport {
  std::uint64_t ticket = 0;  // the ticket passed to Sink::send
  DeliveryOutcome outcome = DeliveryOutcome::unknown;
  std::string error;  // empty when published
  // Where the broker stored it, when the broker says (Kafka: partition and offset); -1 otherwise.
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  // A failure the destination asked to retry no sooner than this (HTTP Retry-After); 0: the
  // relay's own backoff alone.
  std::chrono::milliseconds retry_after{0};
};

// A destination. The relay drives one Sink from one thread: send() many, poll() for reports.
// Implementations need not be thread safe, except stats().
class Sink {
 public:
  virtual ~Sink() = default;

  // Starts publishing `event`. Returns without waiting for the broker, except that it may block
  // up to a few hundred milliseconds when the client's own queue is full. Every send produces
  // exactly one DeliveryReport with the same ticket from a later poll(). Events sent in order
  // for one aggregate reach the broker in that order unless one of them fails.
  virtual void send(const Event& event, std::uint64_t ticket) = 0;

  // Waits up to `max_wait` for at least one report (returns at once when one is ready), then
  // appends every report that is ready to `reports`.
  virtual void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) = 0;

  // Sends not yet reported.
  [[nodiscard]] virtual std::size_t in_flight() const = 0;

  // True when the destination cannot recognise a repeat (the HTTP sink with
  // HttpOnUnknown::reconcile): an event another relay session may already have sent (it claimed
  // it and ended, or its lease ran out, with no outcome written) is then not sent again but
  // parked in doubt; the relay commits its claims and marks synchronously (durable_marks), since
  // a claim lost in a PostgreSQL crash would hide a send; and it refuses the change-data-capture
  // source (a streamed event has no claim to tell that from).
  [[nodiscard]] virtual bool repeats_are_duplicates() const { return false; }

  // A short description for logs, e.g. "kafka(127.0.0.1:39093)".
  [[nodiscard]] virtual std::string describe() const = 0;

  // The sink's own statistics, from any thread (the one method that may be called from another
  // thread). Each sink defines its list once (outbox/stats.hpp); the relay's metrics, JSON and
  // text line carry them with no code of their own. Prometheus names start with outbox_relay_.
  [[nodiscard]] virtual std::vector<StatSample> stats() const { return {}; }

  // A descriptor that is readable whenever poll() may have a report to give at once, or -1 (the
  // default); a report the sink makes inside poll() itself (a backstop's expiry) need not signal,
  // since the relay's wait is bounded. poll() makes it unreadable again when it hands out
  // everything that was ready; a report made outside poll() (a send refused at once) makes it
  // readable. It may be readable with nothing to give (a spurious wake-up costs the relay one
  // turn), never unreadable with a report ready. With one, the relay waits on it and its change
  // stream's socket together instead of in poll(), so that what the stream brings meanwhile is read
  // at once, not after the broker's next answer.
  [[nodiscard]] virtual int wake_fd() const { return -1; }
};

}  // namespace outbox
