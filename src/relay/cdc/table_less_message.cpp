#include "relay/cdc/table_less_message.hpp"

#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace outbox::detail {

namespace {

// The transaction that carries the message: its xid's low 32 bits are Begin's.
std::string read_xid(const nlohmann::json& doc, std::uint32_t begin_xid) {
  auto xid = doc.at("xid").get<std::string>();
  if (xid.empty() || xid.size() > 20 || xid.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("xid is not a transaction id");
  }
  if (static_cast<std::uint32_t>(std::stoull(xid) & 0xFFFFFFFFULL) != begin_xid) {
    throw std::invalid_argument("xid is not the transaction's that carries the message");
  }
  return xid;
}

// One item of "events". get<int64_t>() would convert a float silently: integers only.
Event read_event(const nlohmann::json& item) {
  Event event;
  const std::optional<EventId> id = EventId::parse(item.at("event_id").get<std::string>());
  if (!id) throw std::invalid_argument("event_id is not a UUID");
  event.event_id = *id;
  const nlohmann::json& sequence = item.at("sequence");
  const nlohmann::json& version = item.at("schema_version");
  if (!sequence.is_number_integer() || !version.is_number_integer() ||
      sequence.get<std::int64_t>() < 1 || version.get<std::int64_t>() < 1 ||
      version.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
    throw std::invalid_argument("sequence or schema_version is not a positive integer");
  }
  event.aggregate_sequence = sequence.get<std::int64_t>();
  event.event_type = item.at("event_type").get<std::string>();
  event.schema_version = static_cast<std::int32_t>(version.get<std::int64_t>());
  event.payload = item.at("payload").get<std::string>();
  event.headers = item.at("headers").get<std::string>();
  return event;
}

bool table_accepts(const Event& event) {
  return !event.aggregate_type.empty() && !event.aggregate_id.empty() &&
         !event.event_type.empty() && nlohmann::json::accept(event.payload) &&
         nlohmann::json::accept(event.headers) && nlohmann::json::parse(event.headers).is_object();
}

TableLessMessage read_message(std::string_view content, std::uint32_t begin_xid) {
  const nlohmann::json doc = nlohmann::json::parse(content);
  TableLessMessage message;
  message.xid = read_xid(doc, begin_xid);
  const auto occurred_at = doc.at("occurred_at").get<std::string>();
  const auto aggregate_type = doc.at("aggregate_type").get<std::string>();
  const auto aggregate_id = doc.at("aggregate_id").get<std::string>();
  const nlohmann::json& items = doc.at("events");
  if (!items.is_array() || items.empty()) throw std::invalid_argument("no events");
  for (const nlohmann::json& item : items) {
    Event event = read_event(item);
    event.aggregate_type = aggregate_type;
    event.aggregate_id = aggregate_id;
    event.occurred_at = occurred_at;
    if (!table_accepts(event)) {
      throw std::invalid_argument("an empty name, or payload or headers not JSON");
    }
    message.events.push_back(std::move(event));
  }
  return message;
}

}  // namespace

std::variant<TableLessMessage, std::string> parse_table_less_message(std::string_view content,
                                                                     std::uint32_t begin_xid) {
  TableLessMessage message;
  try {
    message = read_message(content, begin_xid);
  } catch (const std::exception& error) {
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
