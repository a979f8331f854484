#pragma once
// From a streamed insert into outbox_events to the Event the relay sends: which of the
// relation's columns hold what (by name, once per Relation message), and the decoding of one
// Insert's text values. No I/O (tests/unit/outbox_rows_test.cpp).

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "cdc/pgoutput.hpp"
#include "outbox/event.hpp"

namespace outbox::cdc {

// Where each column the relay needs sits in the relation's (and so each Insert's) columns.
struct OutboxColumns {
  std::uint32_t relation_id = 0;
  std::vector<std::size_t> positions;  // in the order of kOutboxColumnNames
};

// The columns of outbox_events a streamed event is made of.
const std::vector<std::string>& outbox_column_names();

// The positions for `relation` (outbox_events as the publication sends it), or a DecodeError
// naming the first column it lacks (an outbox schema older than the relay, or the wrong table).
std::variant<OutboxColumns, DecodeError> map_outbox_columns(const Relation& relation);

// A streamed outbox row: the event, and whether it is due now (a row inserted with a later
// available_at waits for the table path).
struct StreamedRow {
  Event event;
  bool due = true;
};

// Decodes one Insert of the relation `columns` was made for. Every needed value must be sent as
// text and not null; the event id must be a UUID and the numbers in range. Anything else is a
// DecodeError (an event the relay cannot read is left to the table path, which reads it by SQL).
std::variant<StreamedRow, DecodeError> decode_outbox_insert(const Insert& insert,
                                                            const OutboxColumns& columns);

}  // namespace outbox::cdc
