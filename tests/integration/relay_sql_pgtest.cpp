// The relay's statements run with generic plans, made once per connection (relay.cpp), so each
// must have one sensible plan whatever outbox_events' size and statistics: every read of
// outbox_events by ctid or by an index condition, never a sequential scan and never a whole-index
// scan. A generic plan made while the table was empty (where every deployment starts) once kept a
// sequential scan for the mark as the table grew: 345 events/s.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "relay/relay_sql.hpp"
#include "support/test_env.hpp"

namespace outbox {
namespace {

using nlohmann::json;
using testing::connect;
using testing::fresh_schema;

// Prepared as the relay prepares them: parameter types inferred by PostgreSQL.
struct Statement {
  std::string name, sql, arguments;
};

std::vector<Statement> relay_statements(const SchemaName& schema) {
  const std::string ids = "'{00000000-0000-7000-8000-000000000001}'";
  return {
      {"claim", relay_sql::claim(schema), "'token', '500', '30000', '', ''"},
      {"mark_published", relay_sql::mark_published(schema),
       ids + ", '{token}', 'token', '30000', 'true'"},
      {"mark_failed", relay_sql::mark_failed(schema),
       ids + ", '{token}', '{boom}', '100', '60000', '5', '{false}'"},
      {"renew", relay_sql::renew(schema), ids + ", '{token}', '30000'"},
  };
}

// What reads outbox_events other than by ctid or by an index condition, in a JSON plan.
void find_wide_reads(const json& node, std::vector<std::string>& found) {
  if (node.value("Relation Name", "") == "outbox_events") {
    const std::string type = node.value("Node Type", "");
    const bool narrow = (type == "Tid Scan" && node.contains("TID Cond")) ||
                        ((type == "Index Scan" || type == "Index Only Scan") &&
                         node.contains("Index Cond")) ||
                        type == "ModifyTable";
    if (!narrow) found.push_back(type + " " + node.value("Index Name", ""));
  }
  for (const json& child : node.value("Plans", json::array())) find_wide_reads(child, found);
}

// The generic plan of every relay statement, as the relay's connection makes it.
void expect_only_narrow_reads(const SchemaName& schema, const std::string& state) {
  auto c = connect();
  pg::exec(c.get(), "SET plan_cache_mode = force_generic_plan");
  for (const Statement& s : relay_statements(schema)) {
    pg::exec(c.get(), "PREPARE s AS " + s.sql);
    const auto result = pg::exec(c.get(), "EXPLAIN (FORMAT JSON) EXECUTE s (" + s.arguments + ")");
    const json plan = json::parse(std::string(result.text(0, 0))).at(0).at("Plan");
    std::vector<std::string> wide;
    find_wide_reads(plan, wide);
    EXPECT_TRUE(wide.empty()) << s.name << " " << state << " reads outbox_events by: "
                              << json(wide).dump() << "\n" << plan.dump(1);
    pg::exec(c.get(), "DEALLOCATE s");
  }
}

void load(const SchemaName& schema, int events, bool published) {
  auto c = connect();
  pg::exec(c.get(), "INSERT INTO " + schema.table("outbox_events") +
                        " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                        "  payload, published_at)"
                        " SELECT gen_random_uuid(), 'order', 'order-' || (i % 1000), i / 1000 + 1,"
                        "  'OrderPlaced', '{\"n\": 1}', " +
                        std::string(published ? "now()" : "NULL") +
                        " FROM generate_series(0, $1::int - 1) i",
           {std::to_string(events).c_str()});
}

TEST(RelaySqlPlans, OnAnEmptyTableNeverAnalyzed) {
  expect_only_narrow_reads(fresh_schema(), "on an empty table never analyzed");
}

TEST(RelaySqlPlans, OnABacklogBeforeAndAfterAnalyze) {
  const SchemaName schema = fresh_schema();
  load(schema, 50000, false);
  expect_only_narrow_reads(schema, "on a backlog of 50,000 never analyzed");
  pg::exec(connect().get(), "ANALYZE " + schema.table("outbox_events"));
  expect_only_narrow_reads(schema, "on an analyzed backlog of 50,000");
}

// A long history and nothing pending: the pending index is empty, so scanning it whole looks free.
TEST(RelaySqlPlans, OnAHistoryWithNothingPending) {
  const SchemaName schema = fresh_schema();
  load(schema, 50000, true);
  pg::exec(connect().get(), "VACUUM ANALYZE " + schema.table("outbox_events"));
  expect_only_narrow_reads(schema, "on an analyzed history of 50,000 published events");
}

}  // namespace
}  // namespace outbox
