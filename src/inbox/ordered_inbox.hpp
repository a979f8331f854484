#pragma once
// One transaction of the gap-aware inbox: lock the aggregates it touches, load their held events,
// run each aggregate's plan (sequence_plan.hpp) through the effect, and write back positions,
// held rows and deletions. Used by Inbox::process_in_order and Inbox::carry_out_decisions.

#include <libpq-fe.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "inbox/sequence_plan.hpp"
#include "outbox/inbox.hpp"

namespace outbox::detail {

struct AggregateKey {
  std::string type;
  std::string id;
  auto operator<=>(const AggregateKey&) const = default;
};

// What a plan's steps did, for the batch's results.
struct StepTally {
  std::uint64_t applied_from_held = 0;
  std::uint64_t decided = 0;
  std::vector<EventId> parked;
};

class OrderedTransaction {
 public:
  OrderedTransaction(const Inbox& inbox, PGconn* conn, const Inbox::Effect& effect);

  // Locks the aggregates' rows in inbox_aggregates (made, without a position, when missing) in
  // one order, and loads their positions and held events. Once per transaction.
  void lock_and_load(std::vector<AggregateKey> keys);
  // Which of `events` this consumer applied before, or holds: read after lock_and_load, so a
  // twin that applied one of them has committed (it held the aggregate's lock).
  std::set<EventId> processed(std::span<const ConsumedEvent> events);
  // The aggregates with an operator's decision pending (at most `limit`).
  std::vector<AggregateKey> decided_aggregates(int limit);

  // Plans and runs one aggregate: `fresh` are the batch's new events of it (PlanEvent::index
  // into `batch`). Writes each fresh event's result into `results`.
  void run(const AggregateKey& key, const std::vector<PlanEvent>& fresh,
           std::span<const ConsumedEvent> batch, std::vector<InboxResult>& results,
           const std::map<EventId, ParkRequest>& park, StepTally& tally);

  // Writes the positions, the new held and parked rows, the deleted ones.
  void write();

  // The event whose effect is running, or threw; nullptr when none did. Whether it carried an
  // operator's decision.
  [[nodiscard]] const ConsumedEvent* attempting() const noexcept { return attempting_; }
  [[nodiscard]] bool attempting_decided() const noexcept { return attempting_decided_; }

  // Why an event cannot be brought to the version the effect is written for ("" when it can):
  // such an event is parked as 'unknown_version', fresh or held.
  void park_unknown_versions(std::function<std::string(const ConsumedEvent&)> unknown) {
    unknown_version_ = std::move(unknown);
  }

 private:
  struct Held {
    ConsumedEvent event;
    bool blocking = false;
    Decision decision = Decision::none;
  };
  struct NewRow {
    const ConsumedEvent* event;
    std::string kind;
    std::string reason;
  };
  void apply(const ConsumedEvent& event);
  std::vector<PlanEvent> plan_events(const std::vector<Held>& held,
                                     const std::vector<PlanEvent>& fresh,
                                     std::span<const ConsumedEvent> batch,
                                     const std::map<EventId, ParkRequest>& park,
                                     std::map<EventId, ParkRequest>& parking);
  void park_event(const Step& step, const ConsumedEvent& event, const ParkRequest& request,
                  std::vector<InboxResult>& results, StepTally& tally);

  const Inbox& inbox_;
  PGconn* conn_;
  const Inbox::Effect& effect_;
  std::map<AggregateKey, std::optional<std::int64_t>> positions_;
  std::map<AggregateKey, std::vector<Held>> held_;
  std::map<AggregateKey, std::int64_t> moved_;
  std::vector<NewRow> new_rows_;
  std::vector<NewRow> parked_held_;  // held rows parked in place
  std::vector<EventId> deleted_;
  // processed_events rows to write: what was applied, skipped or found a repeat (held events
  // have none until then, so the audit never counts one as applied).
  std::vector<EventId> processed_;
  const ConsumedEvent* attempting_ = nullptr;
  bool attempting_decided_ = false;
  std::function<std::string(const ConsumedEvent&)> unknown_version_;
};

}  // namespace outbox::detail
