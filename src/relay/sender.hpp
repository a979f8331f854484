#pragma once
// The relay's send side: sends fetched events through the sink into the send window, takes the
// sink's reports back into the window as outcomes, keeps the in-flight gauges and reads the
// broker's health from the reports (an ack means it works; only transient failures mean it does
// not). The loop (relay.cpp) decides when; the window keeps the books without I/O.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/health_board.hpp"
#include "outbox/error.hpp"
#include "outbox/sink.hpp"
#include "relay/event_source.hpp"
#include "relay/relay_counters.hpp"
#include "relay/send_window.hpp"

namespace outbox::detail {

class Sender {
 public:
  Sender(std::string relay_id, std::unique_ptr<Sink> sink, SendWindow& window,
         RelayCounters& counters, HealthBoard& health)
      : relay_id_(std::move(relay_id)),
        sink_(std::move(sink)),
        window_(window),
        counters_(counters),
        health_(health) {
    if (!sink_) throw InvalidArgument("relay: the sink is null");
  }

  // Takes each event into the window and hands it to the sink.
  void send(std::vector<SourcedEvent>& events);

  // Waits up to `wait` for reports (reports: cleared, then what came) and takes them into the
  // window. With nothing in flight nothing can come: sleeps `wait` when `sleep_if_empty`.
  void poll(std::chrono::milliseconds wait, std::vector<DeliveryReport>& reports,
            bool sleep_if_empty = false);

  // Takes reports until nothing is in flight or `deadline` passed.
  void drain(std::chrono::steady_clock::time_point deadline);

  [[nodiscard]] bool repeats_are_duplicates() const { return sink_->repeats_are_duplicates(); }
  // Readable while poll() may have reports without waiting; -1 when the sink has none.
  [[nodiscard]] int wake_fd() const { return sink_->wake_fd(); }

  // The sink's own statistics; any thread.
  [[nodiscard]] std::vector<StatSample> sink_stats() const { return sink_->stats(); }

 private:
  void take(const std::vector<DeliveryReport>& reports);
  // Records an event another session may have sent as in doubt, without sending it.
  void park_in_doubt(std::uint64_t ticket);
  void count_window();

  std::string relay_id_;
  std::unique_ptr<Sink> sink_;
  SendWindow& window_;
  RelayCounters& counters_;
  HealthBoard& health_;
};

}  // namespace outbox::detail
