// See overview_json.hpp.

#include "observe/overview_json.hpp"

namespace outbox::observe {

nlohmann::json backlog_json(const std::vector<BacklogRow>& rows) {
  nlohmann::json backlog = nlohmann::json::array();
  for (const BacklogRow& row : rows) {
    backlog.push_back({{"aggregate_type", row.aggregate_type},
                       {"pending", row.pending},
                       {"oldest_pending_age", row.oldest_pending_age},
                       {"quarantined", row.quarantined}});
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

}  // namespace outbox::observe
