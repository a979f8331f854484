#pragma once
// How much a relay claim reads: EXPLAIN ANALYZE of the claim statement, summed over every plan
// node as (rows returned + rows filtered away) x loops. Deterministic, unlike a timing.

#include <functional>
#include <nlohmann/json.hpp>

#include "pg/connection.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::testing {

// Runs (and rolls back) one claim of `batch` from the start of the aggregates.
inline long long claim_plan_rows(PGconn* conn, const SchemaName& schema, int batch) {
  const std::string batch_text = std::to_string(batch);
  pg::exec(conn, "BEGIN");
  const auto plan = pg::exec(
      conn, "EXPLAIN (ANALYZE, FORMAT JSON) " + relay_sql::claim(schema),
      {"probe:1", batch_text.c_str(), "30000", "", "", "{}", "67108864", "true", "infinity"});
  pg::exec(conn, "ROLLBACK");
  long long touched = 0;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& node) {
    touched += (node.value("Actual Rows", 0LL) + node.value("Rows Removed by Filter", 0LL)) *
               node.value("Actual Loops", 1LL);
    for (const auto& child : node.value("Plans", nlohmann::json::array())) walk(child);
  };
  walk(nlohmann::json::parse(plan.text(0, 0))[0]["Plan"]);
  return touched;
}

}  // namespace outbox::testing
