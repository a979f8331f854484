#include "relay/cdc/outbox_rows.hpp"

#include <charconv>
#include <limits>

#include "common/printable.hpp"

namespace outbox::cdc {

using detail::printable;

namespace {

enum Column : std::size_t {
  kEventId = 0,
  kAggregateType,
  kAggregateId,
  kAggregateSequence,
  kEventType,
  kSchemaVersion,
  kPayload,
  kHeaders,
  kOccurredAt,
  kAvailableAt,
  kAttemptCount,
};

DecodeError error(const std::string& what) { return DecodeError{"outbox insert: " + what, 0}; }

template <typename Integer>
bool parse_integer(std::string_view text, Integer& value) {
  const char* end = text.data() + text.size();
  const auto [stop, code] = std::from_chars(text.data(), end, value);
  return code == std::errc() && stop == end;
}

}  // namespace

const std::vector<std::string>& outbox_column_names() {
  static const std::vector<std::string> names{
      "event_id",    "aggregate_type", "aggregate_id", "aggregate_sequence",
      "event_type",  "schema_version", "payload",      "headers",
      "occurred_at", "available_at",   "attempt_count"};
  return names;
}

std::variant<OutboxColumns, DecodeError> map_outbox_columns(const Relation& relation) {
  auto found = find_columns(relation, outbox_column_names());
  if (auto* missing = std::get_if<MissingColumn>(&found)) {
    return error("relation " + printable(relation.namespace_name) + "." + printable(relation.name) +
                 ": " + missing->message);
  }
  return OutboxColumns{relation.relation_id, std::get<std::vector<std::size_t>>(std::move(found))};
}

std::variant<StreamedRow, DecodeError> decode_outbox_insert(const Insert& insert,
                                                            const OutboxColumns& columns) {
  if (insert.relation_id != columns.relation_id) {
    return error("an insert into relation " + std::to_string(insert.relation_id) +
                 ", not the outbox table's " + std::to_string(columns.relation_id));
  }
  const std::vector<std::string>& names = outbox_column_names();
  std::vector<std::string_view> values(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::size_t position = columns.positions.at(i);
    if (position >= insert.columns.size()) {
      return error("column " + names[i] + " is missing from the insert");
    }
    const TupleColumn& column = insert.columns[position];
    if (column.kind != ColumnKind::text) {
      return error("column " + names[i] + " is not sent as text (null, binary or unchanged)");
    }
    values[i] = column.value;
  }
  StreamedRow row;
  Event& event = row.event;
  const auto id = EventId::parse(values[kEventId]);
  if (!id) return error("event_id " + printable(values[kEventId]) + " is not a UUID");
  event.event_id = *id;
  if (!parse_integer(values[kAggregateSequence], event.aggregate_sequence) ||
      event.aggregate_sequence < 1) {
    return error("aggregate_sequence " + printable(values[kAggregateSequence]) +
                 " is not a positive integer");
  }
  if (!parse_integer(values[kSchemaVersion], event.schema_version) ||
      !parse_integer(values[kAttemptCount], event.attempt_count)) {
    return error("schema_version or attempt_count is not an integer");
  }
  event.aggregate_type = values[kAggregateType];
  event.aggregate_id = values[kAggregateId];
  event.event_type = values[kEventType];
  event.payload = values[kPayload];
  event.headers = values[kHeaders];
  event.occurred_at = values[kOccurredAt];
  // Inserted with both from the same now(): due at once. A later available_at (delayed
  // delivery) or an insert that set either by hand: the table path decides when it is due.
  row.due = values[kAvailableAt] == values[kOccurredAt] && event.attempt_count == 0;
  return row;
}

}  // namespace outbox::cdc
