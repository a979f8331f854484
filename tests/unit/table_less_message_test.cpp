// The table-less message format and its parser (relay/cdc/table_less_message.hpp): pure, no
// PostgreSQL. Any role may emit a message with the outbox prefix, so each refusal is a case here.
#include "relay/cdc/table_less_message.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace outbox::detail {
namespace {

constexpr std::uint32_t kXid = 1234;

// Each case runs through both readers: simdjson's DOM (messages up to kMostBytesForDom) and
// nlohmann's SAX reader (longer ones).
std::size_t most_for_dom = kMostBytesForDom;

std::variant<TableLessMessage, std::string> parse(std::string_view content, std::uint32_t xid) {
  return parse_table_less_message(content, xid, most_for_dom);
}

class TableLessMessageTest : public ::testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override { most_for_dom = GetParam(); }
};

// What a producer's statement emits (producer.cpp, insert_table_less_sql's json_build_object).
nlohmann::json producers(int events = 2) {
  nlohmann::json doc = {{"xid", std::to_string(kXid)},
                        {"occurred_at", "2026-12-02T16:00:00.123456+00:00"},
                        {"aggregate_type", "order"},
                        {"aggregate_id", "o-1"},
                        {"events", nlohmann::json::array()}};
  for (int i = 0; i < events; ++i) {
    doc["events"].push_back(
        {{"event_id", "0190f7a4-1e4b-7a3c-8f00-00000000000" + std::to_string(i)},
         {"sequence", 7 + i},
         {"event_type", "OrderPlaced"},
         {"schema_version", 1},
         {"payload", R"({"total": 12})"},
         {"headers", R"({"traceparent": "00-x"})"}});
  }
  return doc;
}

std::string refusal(const nlohmann::json& doc, std::uint32_t xid = kXid) {
  auto parsed = parse(doc.dump(), xid);
  if (const auto* why = std::get_if<std::string>(&parsed)) return *why;
  return "";
}

TEST_P(TableLessMessageTest, AProducersMessageParsesIntoItsEvents) {
  auto parsed = parse(producers().dump(), kXid);
  ASSERT_TRUE(std::holds_alternative<TableLessMessage>(parsed)) << std::get<std::string>(parsed);
  const TableLessMessage& message = std::get<TableLessMessage>(parsed);
  EXPECT_EQ(message.xid, "1234");
  ASSERT_EQ(message.events.size(), 2U);
  const Event& first = message.events[0];
  EXPECT_EQ(first.event_id.to_string(), "0190f7a4-1e4b-7a3c-8f00-000000000000");
  EXPECT_EQ(first.aggregate_type, "order");
  EXPECT_EQ(first.aggregate_id, "o-1");
  EXPECT_EQ(first.aggregate_sequence, 7);
  EXPECT_EQ(first.event_type, "OrderPlaced");
  EXPECT_EQ(first.schema_version, 1);
  EXPECT_EQ(first.payload, R"({"total": 12})");
  EXPECT_EQ(first.headers, R"({"traceparent": "00-x"})");
  EXPECT_EQ(first.occurred_at, "2026-12-02T16:00:00.123456+00:00");
  EXPECT_EQ(message.events[1].aggregate_sequence, 8);
}

TEST_P(TableLessMessageTest, NotJsonIsRefused) {
  auto parsed = parse("not json", kXid);
  ASSERT_TRUE(std::holds_alternative<std::string>(parsed));
  EXPECT_NE(std::get<std::string>(parsed).find("it is not an outbox producer's message"),
            std::string::npos);
  EXPECT_NE(refusal(nlohmann::json::array()), "");
  nlohmann::json missing = producers();
  missing.erase("aggregate_id");
  EXPECT_NE(refusal(missing), "");
}

TEST_P(TableLessMessageTest, TheXidMustNameTheTransactionThatCarriesIt) {
  for (const char* bad : {"", "12a", "123456789012345678901", "-1"}) {
    nlohmann::json doc = producers();
    doc["xid"] = bad;
    EXPECT_NE(refusal(doc).find("xid is not a transaction id"), std::string::npos) << bad;
  }
  nlohmann::json other = producers();
  other["xid"] = "1235";
  EXPECT_NE(refusal(other).find("not the transaction's"), std::string::npos);
  nlohmann::json epoch = producers();
  epoch["xid"] = std::to_string((std::uint64_t{1} << 32) + kXid);
  EXPECT_EQ(refusal(epoch), "") << "an xid8 of a later epoch carries Begin's 32 bits";
  nlohmann::json number = producers();
  number["xid"] = kXid;
  EXPECT_NE(refusal(number), "") << "a number, not the text a producer writes";
}

TEST_P(TableLessMessageTest, EventsMustBeThereAndWhatTheTableAccepts) {
  nlohmann::json none = producers();
  none["events"] = nlohmann::json::array();
  EXPECT_NE(refusal(none).find("no events"), std::string::npos);
  nlohmann::json object = producers();
  object["events"] = nlohmann::json::object();
  EXPECT_NE(refusal(object).find("no events"), std::string::npos);
  const auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json doc = producers(1);
    doc["events"][0][key] = std::move(value);
    return refusal(doc);
  };
  EXPECT_NE(with("event_id", "not-a-uuid").find("not a UUID"), std::string::npos);
  EXPECT_NE(with("event_type", "").find("an empty name"), std::string::npos);
  EXPECT_NE(with("payload", "{not json").find("not JSON"), std::string::npos);
  EXPECT_NE(with("headers", "[]").find("not JSON"), std::string::npos) << "headers: an object";
  nlohmann::json empty_type = producers(1);
  empty_type["aggregate_type"] = "";
  EXPECT_NE(refusal(empty_type).find("an empty name"), std::string::npos);
}

// The message is read in one pass, without a document (MessageReader): what a document would
// have given must still come out, whatever else the text holds.
TEST_P(TableLessMessageTest, UnknownKeysAreSkippedWholeAndARepeatedKeyKeepsItsLastValue) {
  nlohmann::json extra = producers();
  extra["trace"] = {{"events", nlohmann::json::array({1, 2})}, {"xid", {{"deep", {true}}}}};
  extra["events"][0]["extra"] = nlohmann::json::array({nlohmann::json::object({{"sequence", 99}})});
  extra["events"][1]["note"] = nullptr;
  auto parsed = parse(extra.dump(), kXid);
  ASSERT_TRUE(std::holds_alternative<TableLessMessage>(parsed)) << std::get<std::string>(parsed);
  const TableLessMessage& message = std::get<TableLessMessage>(parsed);
  ASSERT_EQ(message.events.size(), 2U);
  EXPECT_EQ(message.events[0].aggregate_sequence, 7) << "not the 99 inside an unknown key";
  EXPECT_EQ(message.events[1].aggregate_sequence, 8);

  const std::string twice = R"({"xid": "1", "xid": ")" + std::to_string(kXid) +
                            R"(", "occurred_at": "t", "aggregate_type": "a", "aggregate_id": "b",
      "events": [], "events": [{"event_id": "0190f7a4-1e4b-7a3c-8f00-000000000000", "sequence": 1,
      "event_type": "E", "schema_version": 1, "payload": "{}", "headers": "{}"}]})";
  auto last = parse(twice, kXid);
  ASSERT_TRUE(std::holds_alternative<TableLessMessage>(last)) << std::get<std::string>(last);
  EXPECT_EQ(std::get<TableLessMessage>(last).events.size(), 1U);

  // A refused value that a later one for the same key replaces is forgotten, as a document
  // keeping the last value would; the other way round the last one is refused.
  const std::string event = R"({"event_id": "0190f7a4-1e4b-7a3c-8f00-000000000000",
      "sequence": 1, "sequence": 2, "event_type": "E", "schema_version": 1, "payload": "{}",
      "headers": "{}"})";
  const std::string head = R"({"aggregate_type": "a", "aggregate_id": "b", "occurred_at": "t", )";
  const std::string xid = std::to_string(kXid);
  auto later_good = parse(
      head + R"("xid": 5, "xid": ")" + xid + R"(", "events": [1], "events": [)" + event + "]}",
      kXid);
  ASSERT_TRUE(std::holds_alternative<TableLessMessage>(later_good))
      << std::get<std::string>(later_good);
  EXPECT_EQ(std::get<TableLessMessage>(later_good).events.at(0).aggregate_sequence, 2);
  auto later_bad =
      parse(head + R"("xid": ")" + xid + R"(", "xid": 5, "events": [)" + event + "]}", kXid);
  ASSERT_TRUE(std::holds_alternative<std::string>(later_bad));
  EXPECT_NE(std::get<std::string>(later_bad).find("\"xid\" is a number"), std::string::npos);
  auto bad_item_last =
      parse(head + R"("xid": ")" + xid + R"(", "events": [)" + event + R"(, "x"]})", kXid);
  ASSERT_TRUE(std::holds_alternative<std::string>(bad_item_last));
}

TEST_P(TableLessMessageTest, AKnownKeyWithAnotherKindOfValueIsRefused) {
  const auto top = [](const char* key, nlohmann::json value) {
    nlohmann::json doc = producers();
    doc[key] = std::move(value);
    return refusal(doc);
  };
  EXPECT_NE(top("aggregate_id", nlohmann::json::object()).find("\"aggregate_id\" is an object"),
            std::string::npos);
  EXPECT_NE(top("occurred_at", nlohmann::json::array()), "");
  EXPECT_NE(top("aggregate_type", nullptr), "");
  EXPECT_NE(top("events", "[]").find("no events"), std::string::npos);
  nlohmann::json scalar_item = producers(1);
  scalar_item["events"][0] = "an event";
  EXPECT_NE(refusal(scalar_item).find("not an object"), std::string::npos);
  nlohmann::json payload_object = producers(1);
  payload_object["events"][0]["payload"] = {{"total", 12}};
  EXPECT_NE(refusal(payload_object).find("\"payload\" is an object"), std::string::npos)
      << "the payload is JSON text in a string, as the producer writes it";
  nlohmann::json no_headers = producers(1);
  no_headers["events"][0].erase("headers");
  EXPECT_NE(refusal(no_headers).find("no \"headers\""), std::string::npos);
  EXPECT_NE(refusal(nlohmann::json("a string")), "");
}

TEST_P(TableLessMessageTest, SequencesAndVersionsArePositiveIntegers) {
  const auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json doc = producers(1);
    doc["events"][0][key] = std::move(value);
    return refusal(doc);
  };
  EXPECT_NE(with("sequence", 1e300), "") << "a float is not converted";
  EXPECT_NE(with("sequence", 7.0), "");
  EXPECT_NE(with("sequence", 0), "");
  EXPECT_NE(with("sequence", "7"), "");
  EXPECT_NE(with("schema_version", 0), "");
  EXPECT_NE(with("schema_version", std::int64_t{1} << 31), "");
  EXPECT_EQ(with("schema_version", (std::int64_t{1} << 31) - 1), "");
}

// The payload is checked as the table's jsonb would take it (scan_jsonb): numbers past 64 bits
// (jsonb prints 6.022e23 in full digits) and 1,000 levels of nesting are JSON it stores; \u0000,
// text after the value, or a byte that is not UTF-8 are not.
TEST_P(TableLessMessageTest, APayloadIsCheckedAsTheTableWouldTakeIt) {
  const auto with_payload = [](const std::string& payload) {
    nlohmann::json doc = producers(1);
    doc["events"][0]["payload"] = payload;
    return refusal(doc);
  };
  EXPECT_EQ(with_payload(R"({"n": 602200000000000000000000, "m": -10000000000000000000})"), "");
  EXPECT_EQ(with_payload(std::string(1000, '[') + std::string(1000, ']')), "");
  EXPECT_EQ(with_payload(" {\"a\": \"\xc3\xa9\"} "), "");
  EXPECT_NE(with_payload(R"({"a": "\u0000"})"), "");
  EXPECT_NE(with_payload(R"({"a": 1} x)"), "");
  EXPECT_NE(with_payload(""), "");
  // Bytes that are not UTF-8, in the payload's text and in the message's own.
  std::string text = producers(1).dump();
  const std::size_t total = text.find(R"(\"total\": 12)");
  ASSERT_NE(total, std::string::npos) << text;
  std::string bad_payload = text;
  bad_payload.replace(total, 13, "\\\"total\\\": \\\"\xff\\\"");
  EXPECT_NE(parse(bad_payload, kXid).index(), 0U) << bad_payload;
  std::string bad_message = text;
  bad_message.replace(text.find("OrderPlaced"), 11, "Order\xc3");
  EXPECT_NE(parse(bad_message, kXid).index(), 0U) << "a bad byte in the message";
}

TEST_P(TableLessMessageTest, SequencesFollowOneAnother) {
  nlohmann::json gap = producers(2);
  gap["events"][1]["sequence"] = 9;
  EXPECT_EQ(refusal(gap), "its events' sequences do not follow one another");
  nlohmann::json back = producers(2);
  back["events"][1]["sequence"] = 7;
  EXPECT_EQ(refusal(back), "its events' sequences do not follow one another");
}

INSTANTIATE_TEST_SUITE_P(BothReaders, TableLessMessageTest, ::testing::Values(kMostBytesForDom, 0),
                         [](const ::testing::TestParamInfo<std::size_t>& param) {
                           return param.param == 0 ? std::string("sax") : std::string("dom");
                         });

}  // namespace
}  // namespace outbox::detail
