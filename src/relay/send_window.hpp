#pragma once
// The relay's send window: the events sent and not yet reported, each under the ticket its sink
// send carried, and the outcomes of reported ones until they are written to PostgreSQL. It bounds
// what a relay holds by events (max_in_flight) and by payload and header bytes
// (max_in_flight_bytes), and turns broker reports into outcomes. No I/O: the loop (relay.cpp)
// sends, polls and writes; this keeps the books (tests/unit/send_window_test.cpp).
//
// An event's completion token says which claim sent it: the claim token its mark must match. An
// event that came from no claim (Origin::unclaimed: a source that reads events elsewhere, such as
// a replication stream) has no token, and its mark matches the row no one claimed instead.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox::detail {

// Where an event to send came from: a claim (its outcome matches the claim's token), or none.
enum class Origin : std::uint8_t { claimed, unclaimed };

// A finished send whose outcome still has to be written.
struct Outcome {
  EventId event_id;
  std::string token;  // the completion token it was sent under
  std::string error;  // empty: published
  bool permanent = false;
  bool in_doubt = false;  // parked for `outbox reconcile`, never sent again by the relay
  std::chrono::milliseconds retry_after{0};  // the destination's Retry-After (0: none)
  std::uint32_t type = 0;                    // its aggregate type's index in RelayCounters::by_type
  Origin origin = Origin::claimed;
};

class SendWindow {
 public:
  struct InFlight {
    Event event;
    std::string token;
    std::uint64_t bytes = 0;  // payload and headers: what it counts against the byte budget
    std::uint32_t type = 0;   // as Outcome::type
    std::chrono::steady_clock::time_point sent_at{};
    Origin origin = Origin::claimed;
  };

  // What the reports taken by one take() said about the broker.
  struct ReportSummary {
    std::size_t published = 0;
    std::size_t failed = 0;
    std::size_t unknown_tickets = 0;  // reports for no event in flight (ignored)
    // The error of a transient failure when no report of the same batch was an ack: the broker
    // (not the event) is in trouble. A permanent failure is the event's fault and says nothing.
    std::optional<std::string> broker_error;
  };

  // Called by take() for each report it turns into an outcome (for the log).
  using ReportObserver = std::function<void(const InFlight&, const DeliveryReport&)>;

  SendWindow(std::size_t max_events, std::uint64_t max_bytes)
      : max_events_(max_events), max_bytes_(max_bytes) {}

  // Takes `event` into the window; returns the ticket to send it with and the stored event.
  // `type` and `origin` are carried to its outcome; an unclaimed event has no token.
  std::pair<std::uint64_t, const Event&> add(Event event, std::string token, std::uint32_t type = 0,
                                             Origin origin = Origin::claimed);

  // Moves the reported sends to the outcomes still to be written (published, failed).
  ReportSummary take(const std::vector<DeliveryReport>& reports,
                     const ReportObserver& observe = {});

  [[nodiscard]] bool empty() const { return in_flight_.empty(); }
  [[nodiscard]] std::size_t size() const { return in_flight_.size(); }
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
  [[nodiscard]] const std::unordered_map<std::uint64_t, InFlight>& in_flight() const {
    return in_flight_;
  }

  // Events the window may still take.
  [[nodiscard]] std::size_t room() const {
    return in_flight_.size() >= max_events_ ? 0 : max_events_ - in_flight_.size();
  }
  // Payload and header bytes the window may still take.
  [[nodiscard]] std::uint64_t byte_room() const {
    return bytes_ >= max_bytes_ ? 0 : max_bytes_ - bytes_;
  }

  // The event a fetch stopped at because it did not fit needs this many bytes (0: none waits).
  void set_waiting(std::uint64_t bytes) { waiting_bytes_ = bytes; }
  [[nodiscard]] std::uint64_t waiting() const { return waiting_bytes_; }
  // The bytes beyond what the waiting event needs: it comes first, so what arrives by other
  // ways (a mark's successors) must not keep taking the room it waits for.
  [[nodiscard]] std::uint64_t room_beyond_waiting() const {
    const std::uint64_t room = byte_room();
    return room > waiting_bytes_ ? room - waiting_bytes_ : 0;
  }

  // A fetch is worth running when there is room for an event and the bytes the window may take
  // hold the event the last fetch stopped at (any event, when none waits), or when the window is
  // empty: an event larger than the whole budget then goes alone.
  [[nodiscard]] bool allows_a_fetch() const {
    if (in_flight_.empty()) return true;
    if (room() == 0) return false;
    const std::uint64_t bytes_room = byte_room();
    return bytes_room > 0 && bytes_room >= waiting_bytes_;
  }

  // After a reconnect the claims of the events in `moved` (event ids as text), in flight or
  // reported and not yet written, carry `token`: the relay moved them to its new session
  // (relay_sql::adopt), and their marks must match the new token.
  void retoken(const std::unordered_set<std::string>& moved, const std::string& token);

  // Outcomes reported and not yet written. The loop writes them and clears what it wrote; a
  // write that failed leaves them here for the next try.
  std::vector<Outcome>& published() { return published_; }
  std::vector<Outcome>& failed() { return failed_; }
  [[nodiscard]] const std::vector<Outcome>& published() const { return published_; }
  [[nodiscard]] const std::vector<Outcome>& failed() const { return failed_; }
  [[nodiscard]] std::size_t unrecorded() const { return published_.size() + failed_.size(); }

 private:
  std::size_t max_events_;
  std::uint64_t max_bytes_;
  std::unordered_map<std::uint64_t, InFlight> in_flight_;
  std::uint64_t bytes_ = 0;
  std::uint64_t waiting_bytes_ = 0;
  std::uint64_t next_ticket_ = 1;
  std::vector<Outcome> published_;
  std::vector<Outcome> failed_;
};

// Logs one report of relay `relay_id` for `event`: an ack at debug, anything else as a warning.
// The ids come from the table, which any writer can fill: printed escaped (common/printable.hpp).
void log_report(const std::string& relay_id, const Event& event, const DeliveryReport& report);

}  // namespace outbox::detail
