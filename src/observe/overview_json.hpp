#pragma once
// The admin page's overview (/api/overview), list by list, as its JavaScript reads them
// (admin_page.hpp).

#include <nlohmann/json.hpp>
#include <vector>

#include "observe/metric_families.hpp"
#include "outbox/quarantine.hpp"

namespace outbox::observe {

nlohmann::json backlog_json(const std::vector<BacklogRow>& rows);
nlohmann::json quarantine_json(const std::vector<QuarantinedEvent>& events);
nlohmann::json slowest_json(const std::vector<SlowAggregate>& slowest);
nlohmann::json slots_json(const std::vector<SlotRow>& slots);

}  // namespace outbox::observe
