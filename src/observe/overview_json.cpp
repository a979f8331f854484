// See overview_json.hpp.

#include "observe/overview_json.hpp"

#include <algorithm>

#include "observe/verdict.hpp"

namespace outbox::observe {

nlohmann::json backlog_json(const std::vector<BacklogRow>& rows) {
  nlohmann::json backlog = nlohmann::json::array();
  for (const BacklogRow& row : rows) {
    backlog.push_back({{"aggregate_type", row.aggregate_type},
                       {"pending", row.pending},
                       {"oldest_pending_age", row.oldest_pending_age},
                       {"quarantined", row.quarantined},
                       {"in_doubt", row.in_doubt}});
  }
  return backlog;
}

nlohmann::json quarantine_json(const std::vector<QuarantinedEvent>& events) {
  nlohmann::json quarantine = nlohmann::json::array();
  for (const QuarantinedEvent& q : events) {
    quarantine.push_back({{"event_id", q.event_id.to_string()},
                          {"aggregate_type", q.aggregate_type},
                          {"aggregate_id", q.aggregate_id},
                          {"aggregate_sequence", q.aggregate_sequence},
                          {"event_type", q.event_type},
                          {"reason", q.reason},
                          {"last_error", q.last_error},
                          {"quarantined_at", q.quarantined_at},
                          {"blocked_events", q.blocked_events}});
  }
  return quarantine;
}

nlohmann::json inbox_held_json(const std::vector<HeldEvent>& events) {
  nlohmann::json held = nlohmann::json::array();
  for (const HeldEvent& e : events) {
    held.push_back({{"consumer", e.consumer_name},
                    {"event_id", e.event_id.to_string()},
                    {"aggregate_type", e.aggregate_type},
                    {"aggregate_id", e.aggregate_id},
                    {"aggregate_sequence", e.aggregate_sequence},
                    {"event_type", e.event_type},
                    {"schema_version", e.schema_version},
                    {"kind", e.kind},
                    {"parked", e.parked},
                    {"reason", e.reason},
                    {"held_at", e.held_at},
                    {"decision", e.decision}});
  }
  return held;
}

nlohmann::json in_doubt_json(const std::vector<InDoubtEvent>& events) {
  nlohmann::json in_doubt = nlohmann::json::array();
  for (const InDoubtEvent& d : events) {
    in_doubt.push_back({{"event_id", d.event.event_id.to_string()},
                        {"aggregate_type", d.event.aggregate_type},
                        {"aggregate_id", d.event.aggregate_id},
                        {"aggregate_sequence", d.event.aggregate_sequence},
                        {"event_type", d.event.event_type},
                        {"reason", d.reason},
                        {"in_doubt_at", d.in_doubt_at},
                        {"blocked_events", d.blocked_events}});
  }
  return in_doubt;
}

nlohmann::json slowest_json(const std::vector<SlowAggregate>& slowest) {
  nlohmann::json slow = nlohmann::json::array();
  for (const SlowAggregate& a : slowest) {
    slow.push_back({{"aggregate_type", a.aggregate_type},
                    {"aggregate_id", a.aggregate_id},
                    {"pending", a.pending},
                    {"waiting_age", a.waiting_age}});
  }
  return slow;
}

nlohmann::json slots_json(const std::vector<SlotRow>& slots) {
  nlohmann::json out = nlohmann::json::array();
  for (const SlotRow& slot : slots) {
    out.push_back({{"name", slot.name},
                   {"streamed", slot.streamed},
                   {"retained_bytes", slot.retained_bytes}});
  }
  return out;
}

nlohmann::json history_json(const std::vector<HistorySample>& samples) {
  nlohmann::json t = nlohmann::json::array(), pending = nlohmann::json::array(),
                 quarantined = nlohmann::json::array(), oldest = nlohmann::json::array(),
                 rate = nlohmann::json::array(), total = nlohmann::json::array();
  for (const HistorySample& s : samples) {
    t.push_back(s.unix_seconds);
    pending.push_back(s.pending);
    quarantined.push_back(s.quarantined);
    oldest.push_back(s.oldest_age);
    rate.push_back(s.published_per_second < 0 ? nlohmann::json(nullptr)
                                              : nlohmann::json(s.published_per_second));
    total.push_back(s.published_total);
  }
  return {{"t", t},
          {"pending", pending},
          {"quarantined", quarantined},
          {"oldest_age", oldest},
          {"published_per_second", rate},
          {"published_total", total}};
}

nlohmann::json verdict_json(const BacklogReading& reading, const nlohmann::json& this_process_parts,
                            const std::vector<HeldCount>& held) {
  VerdictInput in;
  in.backlog_read = reading.ok || !reading.error.empty();
  in.backlog_ok = reading.ok;
  in.backlog_error = reading.error;
  const BacklogTotals totals = backlog_totals(reading.rows);
  in.pending = totals.pending;
  in.quarantined = totals.quarantined;
  in.in_doubt = totals.in_doubt;
  in.oldest_age = totals.oldest_pending_age;
  in.sessions = reading.sessions;
  in.unwell = reading.unwell;
  for (const auto& part : this_process_parts) {
    const std::string state = part.value("state", "");
    // This process's relays say the same through their session rows (reading.unwell).
    if (part.value("part", "").starts_with("relay ")) continue;
    if (state != "running" && state != "starting") {
      in.unwell.push_back(part.value("part", "") + ": " + state);
    }
  }
  for (const SlotRow& slot : reading.slots) {
    if (!slot.streamed) in.unstreamed_slots.push_back(slot.name);
  }
  for (const HeldCount& h : held) {
    if (h.parked > 0) {
      in.parked_at_consumers.emplace_back(h.consumer_name, static_cast<double>(h.parked));
    }
  }
  const std::vector<HistorySample>& history = reading.history;
  if (reading.counts_complete && !history.empty() && history.back().published_per_second >= 0) {
    in.published_last_minute = history.back().published_per_second * 60;
  }
  const Verdict verdict = judge(in);
  return {{"state", verdict.state}, {"reason", verdict.reason}};
}

}  // namespace outbox::observe
