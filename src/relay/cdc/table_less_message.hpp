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

}  // namespace outbox::detail
