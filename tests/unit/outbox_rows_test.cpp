// A streamed insert into outbox_events, decoded into the event the relay sends.
#include "relay/cdc/outbox_rows.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace outbox::cdc {
namespace {

// outbox_events as pgoutput describes it, with an extra column first and the needed ones in a
// different order than outbox_column_names() (positions must come from the names).
Relation outbox_relation() {
  Relation relation;
  relation.relation_id = 16400;
  relation.namespace_name = "outbox";
  relation.name = "outbox_events";
  for (const char* name : {"claimed_by", "payload", "event_id", "aggregate_type", "aggregate_id",
                           "aggregate_sequence", "event_type", "schema_version", "headers",
                           "occurred_at", "available_at", "attempt_count"}) {
    relation.columns.push_back(RelationColumn{0, name, 25, -1});
  }
  return relation;
}

struct Row {
  std::vector<std::string> values{"",  // claimed_by: null below
                                  R"({"total": 5})",
                                  "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b",
                                  "order",
                                  "o-1",
                                  "3",
                                  "OrderPlaced",
                                  "2",
                                  "{}",
                                  "2026-12-01 08:00:00.123456+00",
                                  "2026-12-01 08:00:00.123456+00",
                                  "0"};
  Insert insert(std::uint32_t relation_id = 16400) const {
    Insert insert;
    insert.relation_id = relation_id;
    for (std::size_t i = 0; i < values.size(); ++i) {
      insert.columns.push_back(
          TupleColumn{i == 0 ? ColumnKind::null : ColumnKind::text, values[i]});
    }
    return insert;
  }
};

OutboxColumns columns() { return std::get<OutboxColumns>(map_outbox_columns(outbox_relation())); }

TEST(OutboxRows, AnInsertBecomesTheEventWithItsColumnsFoundByName) {
  const Row row;
  const auto decoded = decode_outbox_insert(row.insert(), columns());
  ASSERT_TRUE(std::holds_alternative<StreamedRow>(decoded))
      << std::get<DecodeError>(decoded).message;
  const StreamedRow& streamed = std::get<StreamedRow>(decoded);
  EXPECT_EQ(streamed.event.event_id.to_string(), "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b");
  EXPECT_EQ(streamed.event.aggregate_type, "order");
  EXPECT_EQ(streamed.event.aggregate_id, "o-1");
  EXPECT_EQ(streamed.event.aggregate_sequence, 3);
  EXPECT_EQ(streamed.event.event_type, "OrderPlaced");
  EXPECT_EQ(streamed.event.schema_version, 2);
  EXPECT_EQ(streamed.event.payload, R"({"total": 5})");
  EXPECT_EQ(streamed.event.headers, "{}");
  EXPECT_TRUE(streamed.due);
}

TEST(OutboxRows, ARowNotDueAtOnceIsMarkedSo) {
  Row row;
  row.values[10] = "2026-12-01 09:00:00+00";  // available_at later than occurred_at
  EXPECT_FALSE(std::get<StreamedRow>(decode_outbox_insert(row.insert(), columns())).due);
}

TEST(OutboxRows, ARelationWithoutAColumnIsRefusedByName) {
  Relation relation = outbox_relation();
  relation.columns.erase(relation.columns.begin() + 11);  // attempt_count
  const auto mapped = map_outbox_columns(relation);
  ASSERT_TRUE(std::holds_alternative<DecodeError>(mapped));
  EXPECT_NE(std::get<DecodeError>(mapped).message.find("attempt_count"), std::string::npos)
      << std::get<DecodeError>(mapped).message;
}

TEST(OutboxRows, BadValuesAreErrorsNamingTheColumn) {
  auto message = [](const Row& row, std::uint32_t relation_id = 16400) {
    const auto decoded = decode_outbox_insert(row.insert(relation_id), columns());
    return std::holds_alternative<DecodeError>(decoded) ? std::get<DecodeError>(decoded).message
                                                        : std::string("decoded");
  };
  Row bad_id;
  bad_id.values[2] = "not-a-uuid";
  EXPECT_NE(message(bad_id).find("event_id"), std::string::npos) << message(bad_id);
  Row zero;
  zero.values[5] = "0";
  EXPECT_NE(message(zero).find("aggregate_sequence"), std::string::npos);
  Row huge;
  huge.values[5] = "99999999999999999999";
  EXPECT_NE(message(huge).find("aggregate_sequence"), std::string::npos);
  Row version;
  version.values[7] = "2x";
  EXPECT_NE(message(version).find("schema_version"), std::string::npos);
  EXPECT_NE(message(Row{}, 1).find("not the outbox table"), std::string::npos);

  Insert nulled = Row{}.insert();
  nulled.columns[1].kind = ColumnKind::null;  // payload
  const auto decoded = decode_outbox_insert(nulled, columns());
  ASSERT_TRUE(std::holds_alternative<DecodeError>(decoded));
  EXPECT_NE(std::get<DecodeError>(decoded).message.find("payload"), std::string::npos);
  Insert short_insert = Row{}.insert();
  short_insert.columns.resize(5);
  EXPECT_TRUE(std::holds_alternative<DecodeError>(decode_outbox_insert(short_insert, columns())));
}

}  // namespace
}  // namespace outbox::cdc
