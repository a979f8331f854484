#pragma once
// The admin page's overview (/api/overview), list by list, as its JavaScript reads them
// (admin_page.hpp).

#include <nlohmann/json.hpp>
#include <vector>

#include "observe/backlog_monitor.hpp"
#include "observe/history.hpp"
#include "observe/metric_families.hpp"
#include "outbox/inbox_admin.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/reconcile.hpp"

namespace outbox::observe {

nlohmann::json backlog_json(const std::vector<BacklogRow>& rows);
nlohmann::json quarantine_json(const std::vector<QuarantinedEvent>& events);
nlohmann::json in_doubt_json(const std::vector<InDoubtEvent>& events);
// Events gap-aware consumers hold back (outbox inbox list), parked first.
nlohmann::json inbox_held_json(const std::vector<HeldEvent>& events);
nlohmann::json slowest_json(const std::vector<SlowAggregate>& slowest);
nlohmann::json slots_json(const std::vector<SlotRow>& slots);
// Column by column: t (unix seconds), pending, quarantined, oldest_age, published_per_second
// (null where not known), published_total (since the server's first backlog run).
nlohmann::json history_json(const std::vector<HistorySample>& samples);
// The headline (verdict.hpp) from the backlog thread's reading with its history, and the parts
// this process runs ({part, state, detail} each, as the overview lists them), and what the
// gap-aware consumers hold (count_held).
nlohmann::json verdict_json(const BacklogReading& reading, const nlohmann::json& this_process_parts,
                            const std::vector<HeldCount>& held);

}  // namespace outbox::observe
