// The table-less message read with nlohmann's SAX interface: for messages too large for simdjson's
// DOM, which allocates some 15 bytes per byte of the text it reads (table_less_message.cpp reads
// the rest). Same result as that reader, checked by the fuzz target on every input.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "relay/cdc/table_less_message.hpp"

namespace outbox::detail {

namespace {

using json = nlohmann::json;

// The message read in one pass with nlohmann's SAX interface: each field a producer writes goes
// straight to its place and no document is built (building one was most of a table-less relay's
// CPU: docs/PERFORMANCE.md). Keys it does not know are skipped whole, and a key given twice keeps
// its last value, as a parsed document would: a known key whose value is of another kind is
// noted as a problem, which a later value of the right kind for that key clears.
class MessageReader final : public nlohmann::json_sax<json> {
 public:
  struct Item {
    std::optional<std::string> event_id, event_type, payload, headers;
    std::optional<std::int64_t> sequence, schema_version;
    std::map<std::string, std::string> bad;  // key -> why its last value is refused
  };
  std::optional<std::string> xid, occurred_at, aggregate_type, aggregate_id;
  std::optional<std::vector<Item>> items;  // "events", when it was an array
  std::map<std::string, std::string> bad;  // of the top object, as Item::bad
  std::string problem;                     // why the text could not be read at all

  bool null() override { return other("null"); }
  bool boolean(bool /*value*/) override { return other("a boolean"); }
  bool number_integer(number_integer_t value) override { return integer(value); }
  bool number_unsigned(number_unsigned_t value) override {
    constexpr auto kMost = static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max());
    return integer(value > kMost ? -1 : static_cast<std::int64_t>(value));  // -1: never valid
  }
  bool number_float(number_float_t /*value*/, const string_t& text) override {
    // An integer past 64 bits, anywhere: simdjson refuses the whole text, and so does this.
    if (text.find_first_of(".eE") == string_t::npos) return fail("an integer out of range");
    return other("a number that is not an integer");
  }
  bool binary(binary_t& /*value*/) override { return other("binary"); }
  bool string(string_t& value) override {
    if (std::optional<std::string>* field = text_field()) {
      *field = std::move(value);
      good();
      return true;
    }
    return other("a string");
  }
  bool start_object(std::size_t /*size*/) override { return open(true); }
  bool start_array(std::size_t /*size*/) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& value) override {
    key_ = std::move(value);
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& error) override {
    if (problem.empty()) problem = error.what();
    return false;
  }

 private:
  enum class Frame { top, events, item, skipped };

  bool open(bool object) {
    // simdjson's depth limit, anywhere (unknown keys too): the same text gets the same answer.
    if (frames_.size() >= kMostDepth) return fail("nested deeper than 1024 levels");
    if (frames_.empty()) {
      if (!object) return fail("not a JSON object");
      frames_.push_back(Frame::top);
      return true;
    }
    switch (frames_.back()) {
      case Frame::top:
        if (key_ == "events") {
          bad.erase("events");
          if (object) items.reset();  // an object, not a list: no events
          if (!object) items.emplace();
          frames_.push_back(object ? Frame::skipped : Frame::events);
          return true;
        }
        break;
      case Frame::events:
        if (object) {
          items->emplace_back();
          frames_.push_back(Frame::item);
          return true;
        }
        break;
      case Frame::item:
      case Frame::skipped:
        break;
    }
    if (known()) refuse(object ? "an object" : "an array");
    frames_.push_back(Frame::skipped);
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  // Whether the current key names a field of the frame it is in.
  [[nodiscard]] bool known() const {
    if (frames_.empty()) return false;
    switch (frames_.back()) {
      case Frame::top:
        return key_ == "xid" || key_ == "occurred_at" || key_ == "aggregate_type" ||
               key_ == "aggregate_id" || key_ == "events";
      case Frame::item:
        return key_ == "event_id" || key_ == "event_type" || key_ == "payload" ||
               key_ == "headers" || key_ == "sequence" || key_ == "schema_version";
      case Frame::events:
        return true;  // every item must be an object
      case Frame::skipped:
        return false;
    }
    return false;
  }
  // Where a string for the current key goes; nullptr when it takes none.
  std::optional<std::string>* text_field() {
    if (frames_.empty()) return nullptr;
    if (frames_.back() == Frame::top) {
      return key_ == "xid"              ? &xid
             : key_ == "occurred_at"    ? &occurred_at
             : key_ == "aggregate_type" ? &aggregate_type
             : key_ == "aggregate_id"   ? &aggregate_id
                                        : nullptr;
    }
    if (frames_.back() != Frame::item) return nullptr;
    Item& item = items->back();
    return key_ == "event_id"     ? &item.event_id
           : key_ == "event_type" ? &item.event_type
           : key_ == "payload"    ? &item.payload
           : key_ == "headers"    ? &item.headers
                                  : nullptr;
  }
  bool integer(std::int64_t value) {
    if (!frames_.empty() && frames_.back() == Frame::item &&
        (key_ == "sequence" || key_ == "schema_version")) {
      (key_ == "sequence" ? items->back().sequence : items->back().schema_version) = value;
      good();
      return true;
    }
    return other("a number");
  }
  // A scalar where the current key takes no such value: "events" that is not a list has no
  // events; another known key refuses it; an unknown key's value is skipped.
  bool other(const char* what) {
    if (frames_.empty()) return fail("not a JSON object");
    if (frames_.back() == Frame::top && key_ == "events") {
      bad.erase("events");
      items.reset();
      return true;
    }
    if (known()) refuse(what);
    return true;
  }
  // The current key's value is of a kind it does not take: noted (the field is gone), unless a
  // later value for the key is good. An item of "events" that is not an object spoils the list.
  void refuse(const char* what) {
    if (frames_.back() == Frame::events) {
      bad["events"] = "an item of \"events\" is not an object";
      return;
    }
    const std::string why = "\"" + key_ + "\" is " + what;
    if (frames_.back() == Frame::item) {
      Item& item = items->back();
      item.bad[key_] = why;
      if (key_ == "sequence") item.sequence.reset();
      if (key_ == "schema_version") item.schema_version.reset();
      if (std::optional<std::string>* field = text_field()) field->reset();
      return;
    }
    bad[key_] = why;
    if (std::optional<std::string>* field = text_field()) field->reset();
  }
  // The current key got a value of its kind: an earlier refused one is forgotten.
  void good() {
    if (frames_.back() == Frame::item) {
      items->back().bad.erase(key_);
    } else {
      bad.erase(key_);
    }
  }
  bool fail(std::string why) {
    problem = std::move(why);
    return false;
  }

  static constexpr std::size_t kMostDepth = 1024;
  std::vector<Frame> frames_;
  std::string key_;
};

template <typename T>
const T& required(const std::optional<T>& field, const char* name) {
  if (!field) throw std::invalid_argument(std::string("no \"") + name + "\"");
  return *field;
}

}  // namespace

TableLessMessage read_table_less_sax(std::string_view content) {
  MessageReader reader;
  if (!json::sax_parse(content, &reader)) {
    throw std::invalid_argument(reader.problem.empty() ? "not JSON" : reader.problem);
  }
  if (!reader.bad.empty()) throw std::invalid_argument(reader.bad.begin()->second);
  TableLessMessage message;
  message.xid = required(reader.xid, "xid");
  const std::string& occurred_at = required(reader.occurred_at, "occurred_at");
  const std::string& aggregate_type = required(reader.aggregate_type, "aggregate_type");
  const std::string& aggregate_id = required(reader.aggregate_id, "aggregate_id");
  if (!reader.items || reader.items->empty()) throw std::invalid_argument("no events");
  for (MessageReader::Item& item : *reader.items) {
    if (!item.bad.empty()) throw std::invalid_argument(item.bad.begin()->second);
    Event event =
        make_event(required(item.event_id, "event_id"), required(item.sequence, "sequence"),
                   required(item.schema_version, "schema_version"));
    event.event_type = std::move(required(item.event_type, "event_type"));
    event.payload = std::move(required(item.payload, "payload"));
    event.headers = std::move(required(item.headers, "headers"));
    event.aggregate_type = aggregate_type;
    event.aggregate_id = aggregate_id;
    event.occurred_at = occurred_at;
    message.events.push_back(std::move(event));
  }
  return message;
}

}  // namespace outbox::detail
