#include "relay/sender.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "common/fault.hpp"
#include "common/log.hpp"
#include "common/timestamp.hpp"

namespace outbox::detail {

void Sender::send(std::vector<SourcedEvent>& events) {
  for (SourcedEvent& sourced : events) {
    const auto type = counters_.by_type.index(sourced.event.aggregate_type);
    if (sourced.event.attempt_count > 0) counters_.by_type.add(type, TypedCounts::retried);
    const auto [ticket, event] =
        window_.add(std::move(sourced.event), std::move(sourced.token), type, sourced.origin);
    if (sourced.taken_over && sink_->repeats_are_duplicates()) {
      park_in_doubt(ticket);
      continue;
    }
    OUTBOX_FAULT(fault::kRelayBeforePublish);
    sink_->send(event, ticket);
  }
  count_window();
}

void Sender::park_in_doubt(std::uint64_t ticket) {
  DeliveryReport report;
  report.ticket = ticket;
  report.outcome = DeliveryOutcome::in_doubt;
  report.error =
      "taken over from a relay session that ended, or whose lease ran out, while it held the "
      "event: it may have sent it, and this destination cannot recognise a repeat";
  take({report});
}

void Sender::poll(std::chrono::milliseconds wait, std::vector<DeliveryReport>& reports,
                  bool sleep_if_empty) {
  reports.clear();
  if (window_.empty()) {
    if (sleep_if_empty) std::this_thread::sleep_for(wait);
    return;
  }
  sink_->poll(wait, reports);
  if (!reports.empty()) take(reports);
}

void Sender::drain(std::chrono::steady_clock::time_point deadline) {
  std::vector<DeliveryReport> reports;
  while (!window_.empty() && std::chrono::steady_clock::now() < deadline) {
    poll(std::chrono::milliseconds(50), reports);
  }
}

void Sender::take(const std::vector<DeliveryReport>& reports) {
  const auto steady_now = std::chrono::steady_clock::now();
  const auto system_now = std::chrono::system_clock::now();
  const auto summary = window_.take(reports, [&](const SendWindow::InFlight& item,
                                                 const DeliveryReport& report) {
    log_report(relay_id_, item.event, report);
    if (report.outcome != DeliveryOutcome::published) {
      counters_.by_type.add(item.type, TypedCounts::failed);
      return;
    }
    counters_.send_to_ack.observe(std::chrono::duration<double>(steady_now - item.sent_at).count());
    // occurred_at is PostgreSQL's clock; a skewed host clock could make it "later".
    if (const auto occurred = parse_timestamptz(item.event.occurred_at)) {
      counters_.commit_to_ack.observe(
          std::max(0.0, std::chrono::duration<double>(system_now - *occurred).count()));
    }
  });
  if (summary.unknown_tickets > 0) {
    log().error("relay {}: {} report(s) for unknown tickets ignored", relay_id_,
                summary.unknown_tickets);
  }
  count_window();
  if (summary.published > 0 && health_.health() == Health::broker_unavailable) {
    health_.set(Health::running);
  } else if (summary.broker_error && health_.health() == Health::running) {
    health_.set(Health::broker_unavailable,
                fmt::format("{}: {}", sink_->describe(), *summary.broker_error));
  }
}

void Sender::count_window() {
  RelayCounters::set(counters_.in_flight, window_.size());
  RelayCounters::set(counters_.in_flight_bytes, window_.bytes());
}

}  // namespace outbox::detail
