// See verdict.hpp.

#include "observe/verdict.hpp"

#include <fmt/format.h>

namespace outbox::observe {
namespace {

std::string age_text(double seconds) {
  if (seconds < 120) return fmt::format("{:.0f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.0f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

std::string events(double n) { return fmt::format("{:.0f} event{}", n, n == 1 ? "" : "s"); }

// What makes the state stalled, or nothing.
std::string stalled_reason(const VerdictInput& in) {
  if (!in.backlog_ok) {
    return "the outbox table cannot be read" +
           (in.backlog_error.empty() ? std::string() : ": " + in.backlog_error);
  }
  if (in.pending > 0 && in.sessions.working + in.sessions.waiting == 0) {
    return fmt::format("{} pending and no relay running{}", events(in.pending),
                       in.sessions.silent > 0
                           ? fmt::format(" ({:.0f} silent: stopped or hung)", in.sessions.silent)
                           : std::string());
  }
  if (in.oldest_age > kLateSeconds && in.published_last_minute == 0) {
    return "nothing published for a minute; the oldest pending event has waited " +
           age_text(in.oldest_age);
  }
  return {};
}

}  // namespace

Verdict judge(const VerdictInput& in) {
  if (!in.backlog_read) return {"starting", "waiting for the first reading of the outbox table"};
  std::vector<std::string> reasons;
  const std::string stalled = stalled_reason(in);
  if (!stalled.empty()) reasons.push_back(stalled);
  if (!in.backlog_ok) return {"stalled", stalled};  // nothing below is known
  const double live = in.sessions.working + in.sessions.waiting;
  if (in.sessions.silent > 0 && live > 0) {
    reasons.push_back(
        fmt::format("{:.0f} relay session(s) silent (stopped or hung)", in.sessions.silent));
  }
  for (const std::string& part : in.unwell) reasons.push_back(part);
  if (in.quarantined > 0) reasons.push_back(events(in.quarantined) + " quarantined");
  if (in.in_doubt > 0) reasons.push_back(events(in.in_doubt) + " in doubt (outbox reconcile)");
  for (const auto& [consumer, parked] : in.parked_at_consumers) {
    if (parked > 0) {
      reasons.push_back(events(parked) + " parked at consumer " + consumer +
                        " (outbox inbox list)");
    }
  }
  if (in.oldest_age > kLateSeconds && stalled.empty()) {
    reasons.push_back("the oldest pending event has waited " + age_text(in.oldest_age));
  }
  for (const std::string& slot : in.unstreamed_slots) {
    reasons.push_back("slot " + slot + " is not streamed and keeps WAL");
  }
  if (live == 0 && stalled.empty()) reasons.push_back("no relay running (nothing pending yet)");
  if (reasons.empty()) {
    if (in.pending == 0)
      return {"healthy", fmt::format("{:.0f} relay(s) running; nothing pending", live)};
    return {"healthy", fmt::format("{:.0f} relay(s) running; {} pending, the oldest {} old", live,
                                   events(in.pending), age_text(in.oldest_age))};
  }
  std::string reason = reasons.front();
  for (std::size_t i = 1; i < reasons.size(); ++i) reason += "; " + reasons[i];
  return {stalled.empty() ? "degraded" : "stalled", reason};
}

}  // namespace outbox::observe
