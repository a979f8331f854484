#pragma once
// The message a table-less producer emits in its transaction (ProducerOptions::table_less;
// producer.cpp's insert_table_less_sql builds it in SQL) and the one parser the relay reads it
// with. Any role may emit a message with the outbox prefix, so everything is checked: what the
// table would refuse is refused here (such an event could be neither sent as the producer's nor
// written to the table). Pure: unit-tested in tests/unit/table_less_message_test.cpp and fuzzed
// (fuzz_table_less_message).
//
//   {"xid": "<xid8 of the transaction>", "occurred_at": "<ISO 8601>",
//    "aggregate_type": "...", "aggregate_id": "...",
//    "events": [{"event_id": "<uuid>", "sequence": 7, "event_type": "...",
//                "schema_version": 1, "payload": "<json text>", "headers": "<json object text>"},
//               ...]}                                    (sequences one after another)

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "outbox/event.hpp"

namespace outbox::detail {

struct TableLessMessage {
  std::string xid;  // the transaction's xid8, decimal
  // One aggregate's events, in order, each with the message's aggregate and occurred_at.
  std::vector<Event> events;
};

// `begin_xid`: the xid of the transaction that carries the message (pgoutput's Begin), which the
// message's xid must name (its low 32 bits): one naming another transaction would wait for that
// one's visibility, perhaps forever. Returns the message, or why it is not a producer's (a
// sentence for the log).
std::variant<TableLessMessage, std::string> parse_table_less_message(std::string_view content,
                                                                     std::uint32_t begin_xid);

// Messages up to this size are read with simdjson's DOM (fast, but it allocates ~15 bytes per
// byte of text, kept for the next message); longer ones with nlohmann's SAX reader (~2 bytes per
// byte, freed at once): a producer's statement may carry up to 64 MiB of events.
inline constexpr std::size_t kMostBytesForDom = 1024 * 1024;
// The same, with another limit: 0 reads every message with the SAX reader (tests, fuzzing).
std::variant<TableLessMessage, std::string> parse_table_less_message(std::string_view content,
                                                                     std::uint32_t begin_xid,
                                                                     std::size_t most_for_dom);

// The two readers: the message's fields as written (the xid unchecked, payloads not looked into),
// or std::invalid_argument saying what is wrong. The same result for every text (the fuzz target
// compares them); std::bad_alloc is not the message's fault and is not a refusal.
TableLessMessage read_table_less_dom(std::string_view content);
TableLessMessage read_table_less_sax(std::string_view content);
// An event with its id, sequence and schema version checked (throws std::invalid_argument).
Event make_event(std::string_view event_id, std::int64_t sequence, std::int64_t schema_version);

}  // namespace outbox::detail
