// The relay's statements run with generic plans, made once per connection under the relay's
// session settings (relay_sql::session_settings), so each must have one sensible plan whatever
// outbox_events' size and statistics: every read of outbox_events by ctid or by an index
// condition, never a sequential scan, a whole-index scan or a sort of what was read. A generic
// plan made while the table was empty (where every deployment starts) once kept a sequential scan
// for the mark as the table grew: 345 events/s.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "relay/cdc/cdc_sql.hpp"
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
      {"claim", relay_sql::claim(schema),
       "'token', '500', '30000', '', '', '{dead:1:}', '67108864', 'true', 'infinity'"},
      {"claim below a stream's horizon", relay_sql::claim(schema),
       "'token', '500', '30000', '', '', '{}', '67108864', 'true', now() - interval '5 s'"},
      {"mark_published", relay_sql::mark_published(schema),
       ids + ", '{token}', 'token', '30000', 'true', '67108864'"},
      {"mark_failed", relay_sql::mark_failed(schema),
       ids + ", '{token}', '{boom}', '100', '60000', '5', '{false}', '{0}', '{false}'"},
      {"renew", relay_sql::renew(schema), ids + ", '{token}', '30000'"},
      {"set_listening", relay_sql::set_listening(schema),
       "'r:1', 'true', '1', '30000', 's', 'streaming', '4242', '17', 'running'"},
      {"adopt", relay_sql::adopt(schema), ids + ", '{token}', '30000', 'new:1'"},
      {"forget_relay", relay_sql::forget_relay(schema), "'r:1'"},
      {"retire_relay", relay_sql::retire_relay(schema), "'r:1'"},
      {"sweep", relay_sql::sweep(schema), "'1000', '10000'"},
      {"mark_streamed", cdc_sql::mark_streamed(schema), ids},
      {"check_streamed", cdc_sql::check_streamed(schema),
       ids + ", '{order}', '{o-1}', '{3}', '{true}', '{NULL}'"},
      {"check_streamed (table-less)", cdc_sql::check_streamed(schema),
       ids + ", '{order}', '{o-1}', '{3}', '{true}', '{1234}'"},
  };
}

bool reads_events(const json& node) {
  if (node.value("Relation Name", "") == "outbox_events") return true;
  for (const json& child : node.value("Plans", json::array())) {
    if (reads_events(child)) return true;
  }
  return false;
}

// What reads outbox_events other than by ctid or by an index condition, in a JSON plan; also a
// sort of what it read (an index scan whose order a LIMIT needs, sorted instead, reads every row
// the condition lets through before the first comes out).
void find_wide_reads(const json& node, std::vector<std::string>& found) {
  if (node.value("Relation Name", "") == "outbox_events") {
    const std::string type = node.value("Node Type", "");
    const bool narrow =
        (type == "Tid Scan" && node.contains("TID Cond")) ||
        ((type == "Index Scan" || type == "Index Only Scan") && node.contains("Index Cond")) ||
        type == "ModifyTable";
    if (!narrow) found.push_back(type + " " + node.value("Index Name", ""));
  }
  const std::string type = node.value("Node Type", "");
  if ((type == "Sort" || type == "Incremental Sort") && reads_events(node)) {
    found.push_back(type + " of outbox_events rows");
  }
  for (const json& child : node.value("Plans", json::array())) find_wide_reads(child, found);
}

// The generic plan of every relay statement, as the relay's connection makes it.
void expect_only_narrow_reads(const SchemaName& schema, const std::string& state) {
  auto c = connect();
  for (const std::string& setting : relay_sql::session_settings()) pg::exec(c.get(), setting);
  for (const Statement& s : relay_statements(schema)) {
    pg::exec(c.get(), "PREPARE s AS " + s.sql);
    const auto result = pg::exec(c.get(), "EXPLAIN (FORMAT JSON) EXECUTE s (" + s.arguments + ")");
    const json plan = json::parse(std::string(result.text(0, 0))).at(0).at("Plan");
    std::vector<std::string> wide;
    find_wide_reads(plan, wide);
    EXPECT_TRUE(wide.empty()) << s.name << " " << state
                              << " reads outbox_events by: " << json(wide).dump() << "\n"
                              << plan.dump(1);
    pg::exec(c.get(), "DEALLOCATE s");
  }
}

void load(const SchemaName& schema, int events, bool published) {
  auto c = connect();
  pg::exec(c.get(),
           "INSERT INTO " + schema.table("outbox_events") +
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

// Emptied and vacuumed (retention deleted every row, then autovacuum ran): PostgreSQL now knows the
// table as empty (reltuples 0, no pages), which makes every sequential scan look free, also in
// place of a ctid lookup. A relay that connects then kept such plans until the next ANALYZE: in a
// test at 1,000 events/s its claims read the whole table, one core went to its session, and it fell
// behind within seconds.
TEST(RelaySqlPlans, OnATableEmptiedAndVacuumed) {
  const SchemaName schema = fresh_schema();
  load(schema, 5000, true);
  auto c = connect();
  pg::exec(c.get(), "DELETE FROM " + schema.table("outbox_events"));
  pg::exec(c.get(), "VACUUM ANALYZE " + schema.table("outbox_events"));
  ASSERT_EQ(testing::count(c.get(), "SELECT relpages FROM pg_class WHERE oid = $1::regclass",
                           {schema.table("outbox_events").c_str()}),
            0);
  expect_only_narrow_reads(schema, "on a table emptied and vacuumed");
  load(schema, 3, false);
  pg::exec(c.get(), "ANALYZE " + schema.table("outbox_events"));
  expect_only_narrow_reads(schema, "on a table of 3 rows, analyzed");
}

// Statistics as autovacuum left them on a table whose rows had been updated over and over (claims
// and marks, here rolled back): measured on 200,000 live rows over 72,786 pages, it recorded 2,096
// tuples. Believing a handful of rows per aggregate on so many pages, PostgreSQL read a head by a
// bitmap heap scan of all its aggregate's pending rows and a sort, instead of the first index
// entry: an aggregate with a deep backlog would be read whole for every claim.
TEST(RelaySqlPlans, OnStatisticsLeftByUpdateChurn) {
  const SchemaName schema = fresh_schema();
  load(schema, 50000, false);
  auto c = connect();
  pg::exec(c.get(), "ANALYZE " + schema.table("outbox_events"));
  pg::exec(c.get(),
           "UPDATE pg_class SET reltuples = 2000, relpages = 70000 WHERE oid = $1::regclass",
           {schema.table("outbox_events").c_str()});
  expect_only_narrow_reads(schema, "with 2,000 tuples on 70,000 pages in the statistics");
}

}  // namespace
}  // namespace outbox
