#include "relay/cdc/table_less_message.hpp"

#include <simdjson.h>

#include <array>
#include <limits>
#include <optional>
#include <stdexcept>

#include "common/jsonb_scan.hpp"

namespace outbox::detail {

namespace {

namespace dom = simdjson::dom;

// Each thread reads with its own parser, reused: a document's strings live in it until it reads
// the next text.
dom::parser& message_parser() {
  thread_local dom::parser parser;
  return parser;
}

// How a refusal names a value of the wrong kind.
const char* kind_of(dom::element value) {
  switch (value.type()) {
    case dom::element_type::ARRAY:
      return "an array";
    case dom::element_type::OBJECT:
      return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
      return "a number";
    case dom::element_type::DOUBLE:
      return "a number that is not an integer";
    case dom::element_type::STRING:
      return "a string";
    case dom::element_type::BOOL:
      return "a boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "a value";
}

// An object's fields among `Names`, each with its key's LAST value, as a document keeping the
// last of a repeated key would (a refused value a later good one replaces is forgotten); keys
// not named are skipped whole.
template <std::size_t N>
class Fields {
 public:
  Fields(dom::object object, const std::array<std::string_view, N>& names) : names_(names) {
    for (const dom::key_value_pair field : object) {
      for (std::size_t i = 0; i < N; ++i) {
        if (field.key == names_[i]) values_[i] = field.value;
      }
    }
  }
  [[nodiscard]] std::optional<dom::element> get(std::size_t i) const { return values_[i]; }
  // The field as text; throws when it is missing or another kind.
  [[nodiscard]] std::string_view text(std::size_t i) const {
    const dom::element value = present(i);
    std::string_view text;
    if (value.get_string().get(text) != simdjson::SUCCESS) wrong(i, value);
    return text;
  }
  // The field as an integer (one past INT64_MAX reads as -1: never valid); throws otherwise.
  [[nodiscard]] std::int64_t integer(std::size_t i) const {
    const dom::element value = present(i);
    std::int64_t number = 0;
    if (value.type() == dom::element_type::INT64 &&
        value.get_int64().get(number) == simdjson::SUCCESS) {
      return number;
    }
    if (value.type() == dom::element_type::UINT64) return -1;  // past INT64_MAX
    wrong(i, value);
  }
  // Refuses the first field (in the order of `Names`) whose value is not of its kind, before any
  // field is missing: `kinds` is 't' for text, 'i' for an integer, anything else for no check.
  void check_kinds(std::string_view kinds) const {
    for (std::size_t i = 0; i < N; ++i) {
      if (!values_[i]) continue;
      const dom::element_type type = values_[i]->type();
      if ((kinds[i] == 't' && type != dom::element_type::STRING) ||
          (kinds[i] == 'i' && type != dom::element_type::INT64 &&
           type != dom::element_type::UINT64)) {
        wrong(i, *values_[i]);
      }
    }
  }

 private:
  [[nodiscard]] dom::element present(std::size_t i) const {
    if (!values_[i]) throw std::invalid_argument("no \"" + std::string(names_[i]) + "\"");
    return *values_[i];
  }
  [[noreturn]] void wrong(std::size_t i, dom::element value) const {
    throw std::invalid_argument("\"" + std::string(names_[i]) + "\" is " + kind_of(value));
  }

  const std::array<std::string_view, N>& names_;
  std::array<std::optional<dom::element>, N> values_;
};

// The message's keys and an item's, in the order their refusals are looked for.
enum Top : std::size_t { kAggregateId, kAggregateType, kEvents, kOccurredAt, kXid };
constexpr std::array<std::string_view, 5> kTopNames{"aggregate_id", "aggregate_type", "events",
                                                    "occurred_at", "xid"};
constexpr std::string_view kTopKinds = "tt-tt";
enum Item : std::size_t { kEventId, kEventType, kHeaders, kPayload, kSchemaVersion, kSequence };
constexpr std::array<std::string_view, 6> kItemNames{"event_id", "event_type",     "headers",
                                                     "payload",  "schema_version", "sequence"};
constexpr std::string_view kItemKinds = "ttttii";

// The transaction that carries the message: its xid's low 32 bits are Begin's.
void check_xid(const std::string& xid, std::uint32_t begin_xid) {
  if (xid.empty() || xid.size() > 20 || xid.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("xid is not a transaction id");
  }
  if (static_cast<std::uint32_t>(std::stoull(xid) & 0xFFFFFFFFULL) != begin_xid) {
    throw std::invalid_argument("xid is not the transaction's that carries the message");
  }
}

// One item of "events".
Event read_event(dom::element element) {
  dom::object object;
  if (element.get_object().get(object) != simdjson::SUCCESS) {
    throw std::invalid_argument("an item of \"events\" is not an object");
  }
  const Fields item(object, kItemNames);
  item.check_kinds(kItemKinds);
  Event event =
      make_event(item.text(kEventId), item.integer(kSequence), item.integer(kSchemaVersion));
  event.event_type = item.text(kEventType);
  event.payload = item.text(kPayload);
  event.headers = item.text(kHeaders);
  return event;
}

// What the table would take: jsonb's own rules (scan_jsonb: numbers past int64 and uint64 are
// fine, \u0000 is not), so an event the relay may have to write to the table always fits.
bool table_accepts(const Event& event) {
  if (event.aggregate_type.empty() || event.aggregate_id.empty() || event.event_type.empty() ||
      !scan_jsonb(event.payload).problem.empty()) {
    return false;
  }
  if (event.headers == "{}") return true;  // what most events carry
  const JsonbScan headers = scan_jsonb(event.headers);
  return headers.problem.empty() && headers.is_object;
}

}  // namespace

Event make_event(std::string_view event_id, std::int64_t sequence, std::int64_t schema_version) {
  Event event;
  const std::optional<EventId> id = EventId::parse(event_id);
  if (!id) throw std::invalid_argument("event_id is not a UUID");
  event.event_id = *id;
  if (sequence < 1 || schema_version < 1 ||
      schema_version > std::numeric_limits<std::int32_t>::max()) {
    throw std::invalid_argument("sequence or schema_version is not a positive integer");
  }
  event.aggregate_sequence = sequence;
  event.schema_version = static_cast<std::int32_t>(schema_version);
  return event;
}

TableLessMessage read_table_less_dom(std::string_view content) {
  dom::element document;
  if (const auto error = message_parser().parse(content.data(), content.size()).get(document)) {
    if (error == simdjson::MEMALLOC) throw std::bad_alloc();  // not the message's fault
    throw std::invalid_argument(std::string("not JSON: ") + simdjson::error_message(error));
  }
  dom::object object;
  if (document.get_object().get(object) != simdjson::SUCCESS) {
    throw std::invalid_argument("not a JSON object");
  }
  const Fields top(object, kTopNames);
  top.check_kinds(kTopKinds);
  // "events" that is not a list has none; a list with an item that is not an object is refused.
  dom::array items;
  const bool listed =
      top.get(kEvents) && top.get(kEvents)->get_array().get(items) == simdjson::SUCCESS;
  if (listed) {
    for (const dom::element item : items) {
      if (item.type() != dom::element_type::OBJECT) {
        throw std::invalid_argument("an item of \"events\" is not an object");
      }
    }
  }
  TableLessMessage message;
  message.xid = top.text(kXid);
  const std::string_view occurred_at = top.text(kOccurredAt);
  const std::string_view aggregate_type = top.text(kAggregateType);
  const std::string_view aggregate_id = top.text(kAggregateId);
  if (!listed || items.size() == 0) throw std::invalid_argument("no events");
  for (const dom::element item : items) {
    Event event = read_event(item);
    event.aggregate_type = aggregate_type;
    event.aggregate_id = aggregate_id;
    event.occurred_at = occurred_at;
    message.events.push_back(std::move(event));
  }
  return message;
}

std::variant<TableLessMessage, std::string> parse_table_less_message(std::string_view content,
                                                                     std::uint32_t begin_xid) {
  return parse_table_less_message(content, begin_xid, kMostBytesForDom);
}

std::variant<TableLessMessage, std::string> parse_table_less_message(std::string_view content,
                                                                     std::uint32_t begin_xid,
                                                                     std::size_t most_for_dom) {
  TableLessMessage message;
  try {
    // What one reader would skip and the other refuse: no producer writes either.
    if (content.find('\0') != std::string_view::npos) {
      throw std::invalid_argument("it holds a NUL byte");
    }
    if (content.starts_with("\xEF\xBB\xBF")) throw std::invalid_argument("it begins with a BOM");
    message = content.size() <= most_for_dom ? read_table_less_dom(content)
                                             : read_table_less_sax(content);
    check_xid(message.xid, begin_xid);
    for (const Event& event : message.events) {
      if (!table_accepts(event)) {
        throw std::invalid_argument("an empty name, or payload or headers not JSON");
      }
    }
  } catch (const std::logic_error& error) {  // invalid_argument, out_of_range: not bad_alloc
    // Not what an outbox producer writes (its statement builds the message).
    return std::string("it is not an outbox producer's message: ") + error.what();
  }
  // A producer's statement numbers its events one after another up to the counter it wrote.
  for (std::size_t i = 1; i < message.events.size(); ++i) {
    // Subtracting: every sequence is at least 1, where adding could pass INT64_MAX.
    if (message.events[i].aggregate_sequence - 1 != message.events[i - 1].aggregate_sequence) {
      return std::string("its events' sequences do not follow one another");
    }
  }
  return message;
}

}  // namespace outbox::detail
