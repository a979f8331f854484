#include "relay/send_window.hpp"

#include <fmt/format.h>

#include "common/log.hpp"
#include "common/printable.hpp"

namespace outbox::detail {

std::pair<std::uint64_t, const Event&> SendWindow::add(Event event, std::string token,
                                                       std::uint32_t type, Origin origin) {
  InFlight item{
      std::move(event), std::move(token), 0, type, std::chrono::steady_clock::now(), origin};
  item.bytes = item.event.payload.size() + item.event.headers.size();
  bytes_ += item.bytes;
  const std::uint64_t ticket = next_ticket_++;
  auto [it, inserted] = in_flight_.emplace(ticket, std::move(item));
  return {ticket, it->second.event};
}

SendWindow::ReportSummary SendWindow::take(const std::vector<DeliveryReport>& reports,
                                           const ReportObserver& observe) {
  ReportSummary summary;
  const DeliveryReport* broker_trouble = nullptr;
  for (const DeliveryReport& report : reports) {
    auto it = in_flight_.find(report.ticket);
    if (it == in_flight_.end()) {
      ++summary.unknown_tickets;
      continue;
    }
    if (observe) observe(it->second, report);
    Outcome outcome{it->second.event.event_id,
                    std::move(it->second.token),
                    {},
                    false,
                    false,
                    {},
                    it->second.type,
                    it->second.origin};
    if (report.outcome == DeliveryOutcome::published) {
      published_.push_back(std::move(outcome));
      ++summary.published;
    } else {
      // Unknown outcomes count as failures: the event is sent again with the same id.
      outcome.permanent = report.outcome == DeliveryOutcome::permanent_failure;
      outcome.in_doubt = report.outcome == DeliveryOutcome::in_doubt;
      outcome.retry_after = report.retry_after;
      // A permanent failure's row says so in its quarantine reason ("permanent failure"): its
      // last error is the broker's words alone. Others say which kind they were.
      outcome.error = outcome.permanent
                          ? report.error
                          : fmt::format("{}: {}", to_string(report.outcome), report.error);
      // A permanent failure is the event's fault; an event in doubt is parked and alerted on by
      // itself (and may come from a takeover, not from the destination).
      if (!outcome.permanent && !outcome.in_doubt) broker_trouble = &report;
      failed_.push_back(std::move(outcome));
      ++summary.failed;
    }
    bytes_ -= it->second.bytes;
    in_flight_.erase(it);
  }
  if (summary.published == 0 && broker_trouble != nullptr) {
    summary.broker_error = broker_trouble->error;
  }
  return summary;
}

void SendWindow::retoken(const std::unordered_set<std::string>& moved, const std::string& token) {
  const auto move = [&](const EventId& event_id, Origin origin, std::string& carried) {
    if (origin == Origin::claimed && moved.contains(event_id.to_string())) carried = token;
  };
  for (auto& [ticket, item] : in_flight_) move(item.event.event_id, item.origin, item.token);
  for (Outcome& outcome : published_) move(outcome.event_id, outcome.origin, outcome.token);
  for (Outcome& outcome : failed_) move(outcome.event_id, outcome.origin, outcome.token);
}

void log_report(const std::string& relay_id, const Event& event, const DeliveryReport& report) {
  if (report.outcome == DeliveryOutcome::published) {
    // Once per event: its arguments (the id's text, two escaped names) cost 2.5% of a table-less
    // relay's thread when built for a line that is not written.
    if (!log().should_log(spdlog::level::debug)) return;
    log().debug("relay {}: event {} ({} {} #{}) acknowledged at [{}]@{}", relay_id,
                event.event_id.to_string(), printable(event.aggregate_type),
                printable(event.aggregate_id), event.aggregate_sequence, report.partition,
                report.offset);
  } else {
    log().warn("relay {}: event {} ({} {} #{}) not published: {}: {}", relay_id,
               event.event_id.to_string(), printable(event.aggregate_type),
               printable(event.aggregate_id), event.aggregate_sequence, to_string(report.outcome),
               printable(report.error));
  }
}

}  // namespace outbox::detail
