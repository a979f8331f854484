// The table-less message parser (src/relay/cdc/table_less_message.hpp), fed what any database
// role may emit with pg_logical_emit_message under the outbox prefix: any bytes give a message or
// a reason, never a crash. A message it accepts holds only what a producer could have written:
// events of one aggregate, sequences one after another from at least 1, names not empty, JSON
// payloads and header objects, and the xid of the transaction that carried it. Both readers
// (simdjson's DOM, nlohmann's SAX for long messages) give the same answer for every input.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "common/jsonb_scan.hpp"
#include "fuzz_common.hpp"
#include "relay/cdc/table_less_message.hpp"

namespace {

using outbox::fuzz::fail;

constexpr std::uint32_t kBeginXid = 1234;  // the seeds' xid

void check_event(const outbox::Event& event, std::string_view input) {
  if (event.aggregate_type.empty() || event.aggregate_id.empty() || event.event_type.empty()) {
    fail("an accepted event with an empty name", input);
  }
  if (event.schema_version < 1) fail("an accepted event with a schema_version below 1", input);
  if (!outbox::detail::scan_jsonb(event.payload).problem.empty()) {
    fail("an accepted payload that jsonb would refuse", input);
  }
  const outbox::detail::JsonbScan headers = outbox::detail::scan_jsonb(event.headers);
  if (!headers.problem.empty() || !headers.is_object) {
    fail("accepted headers that jsonb would refuse or that are not an object", input);
  }
}

bool same(const outbox::Event& a, const outbox::Event& b) {
  return a.event_id == b.event_id && a.aggregate_type == b.aggregate_type &&
         a.aggregate_id == b.aggregate_id && a.aggregate_sequence == b.aggregate_sequence &&
         a.event_type == b.event_type && a.schema_version == b.schema_version &&
         a.payload == b.payload && a.headers == b.headers && a.occurred_at == b.occurred_at;
}

void check_message(const outbox::detail::TableLessMessage& message, std::string_view input) {
  if (message.events.empty()) fail("an accepted message without events", input);
  if ((std::stoull(message.xid) & 0xFFFFFFFFULL) != kBeginXid) {
    fail("an accepted message of another transaction", input);
  }
  const outbox::Event& first = message.events.front();
  if (first.aggregate_sequence < 1) fail("an accepted sequence below 1", input);
  for (std::size_t i = 0; i < message.events.size(); ++i) {
    const outbox::Event& event = message.events[i];
    check_event(event, input);
    if (event.aggregate_type != first.aggregate_type || event.aggregate_id != first.aggregate_id) {
      fail("an accepted message of two aggregates", input);
    }
    if (event.aggregate_sequence - static_cast<std::int64_t>(i) != first.aggregate_sequence) {
      fail("accepted sequences that do not follow one another", input);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parsed = outbox::detail::parse_table_less_message(input, kBeginXid);
  const auto by_sax = outbox::detail::parse_table_less_message(input, kBeginXid, 0);
  if (parsed.index() != by_sax.index()) {
    fail(parsed.index() == 0 ? "accepted by the DOM reader, refused by the SAX reader"
                             : "refused by the DOM reader, accepted by the SAX reader",
         input);
  }
  if (const auto* why = std::get_if<std::string>(&parsed)) {
    if (why->empty()) fail("a refusal without a reason", input);
    return 0;
  }
  const auto& message = std::get<outbox::detail::TableLessMessage>(parsed);
  const auto& other = std::get<outbox::detail::TableLessMessage>(by_sax);
  if (message.xid != other.xid || message.events.size() != other.events.size() ||
      !std::equal(message.events.begin(), message.events.end(), other.events.begin(), same)) {
    fail("the two readers read different events", input);
  }
  check_message(message, input);
  return 0;
}
