// Producer::validate: every rule an event must meet before anything is sent, checked without a
// database. Each rejection is an InvalidArgument whose message names the field.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "contains.hpp"
#include "outbox/error.hpp"
#include "outbox/producer.hpp"

namespace outbox {
namespace {

NewEvent valid_event() {
  NewEvent event;
  event.aggregate_type = "order";
  event.aggregate_id = "4711";
  event.event_type = "OrderPlaced";
  event.payload = R"({"order_id": 4711, "total_cents": 1999})";
  event.headers = R"({"traceparent": "00-4bf92f3577b34da6-00f067aa0ba902b7-01"})";
  return event;
}

// The message of the InvalidArgument that validate(event) throws; fails the test otherwise.
std::string rejection_of(const NewEvent& event, const ProducerOptions& options = {}) {
  try {
    Producer(options).validate(event);
    ADD_FAILURE() << "event was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_FALSE(error.retryable());
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw something other than InvalidArgument: " << error.what();
  }
  return {};
}

// --- accepted events ---

TEST(ProducerValidate, AcceptsAValidEvent) { EXPECT_NO_THROW(Producer().validate(valid_event())); }

TEST(ProducerValidate, AcceptsDefaultsForHeadersAndSchemaVersion) {
  NewEvent event;
  event.aggregate_type = "a";
  event.aggregate_id = "b";
  event.event_type = "c";
  event.payload = "{}";
  EXPECT_EQ(event.headers, "{}");
  EXPECT_EQ(event.schema_version, 1);
  EXPECT_NO_THROW(Producer().validate(event));
}

TEST(ProducerValidate, AcceptsScalarAndArrayPayloads) {
  for (const std::string payload : {"[]", "[1,2]", "\"text\"", "42", "null", "true"}) {
    NewEvent event = valid_event();
    event.payload = payload;
    EXPECT_NO_THROW(Producer().validate(event)) << payload;
  }
}

TEST(ProducerValidate, Accepts255ByteNames) {
  NewEvent event = valid_event();
  event.aggregate_type = std::string(255, 't');
  event.aggregate_id = std::string(255, 'i');
  event.event_type = std::string(255, 'e');
  EXPECT_NO_THROW(Producer().validate(event));
}

TEST(ProducerValidate, AcceptsASuppliedEventId) {
  NewEvent event = valid_event();
  event.event_id = EventId::generate();
  EXPECT_NO_THROW(Producer().validate(event));
}

// What an event becomes as a message, counted as librdkafka counts it: key 4711 (4 bytes),
// framing 36, outbox's five headers (names 64, values: id 36, "OrderPlaced" 11, "order" 5, the
// longest sequence 19, version "1" 1; ten one-byte lengths: 146).
constexpr std::size_t kValidEventFixedBytes = 4 + 36 + 146;

TEST(ProducerValidate, AcceptsAMessageExactlyAtTheLimit) {
  NewEvent event = valid_event();
  event.payload = R"({"k":"v"})";  // jsonb prints {"k": "v"}: 10 bytes
  event.headers = "{}";
  ProducerOptions options;
  options.max_payload_bytes = kValidEventFixedBytes + 10;
  EXPECT_NO_THROW(Producer(options).validate(event));
  options.max_payload_bytes -= 1;
  EXPECT_TRUE(contains(rejection_of(event, options), "would be a message of 196 bytes"));
}

// --- names ---

TEST(ProducerValidate, RejectsEmptyNamesNamingTheField) {
  NewEvent event = valid_event();
  event.aggregate_type.clear();
  EXPECT_TRUE(contains(rejection_of(event), "aggregate_type is empty"));

  event = valid_event();
  event.aggregate_id.clear();
  EXPECT_TRUE(contains(rejection_of(event), "aggregate_id is empty"));

  event = valid_event();
  event.event_type.clear();
  EXPECT_TRUE(contains(rejection_of(event), "event_type is empty"));
}

TEST(ProducerValidate, Rejects256ByteNamesNamingTheFieldAndTheLimit) {
  NewEvent event = valid_event();
  event.aggregate_type = std::string(256, 't');
  EXPECT_TRUE(contains(rejection_of(event), "aggregate_type is 256 bytes; at most 255"));

  event = valid_event();
  event.aggregate_id = std::string(256, 'i');
  EXPECT_TRUE(contains(rejection_of(event), "aggregate_id is 256 bytes; at most 255"));

  event = valid_event();
  event.event_type = std::string(256, 'e');
  EXPECT_TRUE(contains(rejection_of(event), "event_type is 256 bytes; at most 255"));
}

// Issue "Hardening" #3: names are printed by `outbox quarantine list` and in log lines, where
// an ESC sequence clears the screen and a newline forges a line.
TEST(ProducerValidate, RejectsTerminalControlsInNamesNamingFieldCharacterAndOffset) {
  struct Case {
    std::string value, what;
  };
  const std::vector<Case> cases = {
      {"a\x1b[2Jb", "the control character U+001B at byte 1"},
      {"line\nforged", "the control character U+000A at byte 4"},
      {"tab\there", "the control character U+0009 at byte 3"},
      {"del\x7f", "the control character U+007F at byte 3"},
      {"c1\xc2\x85", "the control character U+0085 at byte 2"},
      {"c1\xc2\x9b"
       "31m",
       "the control character U+009B at byte 2"},
      {"gpj\xe2\x80\xae.exe", "the bidirectional control U+202E at byte 3"},
      {"\xe2\x80\xaa"
       "x",
       "the bidirectional control U+202A at byte 0"},
      {"x\xe2\x81\xa6", "the bidirectional control U+2066 at byte 1"},
      {"x\xe2\x81\xa9", "the bidirectional control U+2069 at byte 1"},
      {"x\xe2\x80\xa8y", "the line break U+2028 at byte 1"},
  };
  for (const char* field : {"aggregate_type", "aggregate_id", "event_type"}) {
    for (const Case& c : cases) {
      NewEvent event = valid_event();
      if (std::string(field) == "aggregate_type") event.aggregate_type = c.value;
      if (std::string(field) == "aggregate_id") event.aggregate_id = c.value;
      if (std::string(field) == "event_type") event.event_type = c.value;
      const std::string message = rejection_of(event);
      EXPECT_TRUE(contains(message, std::string(field) + " \"")) << message;
      EXPECT_TRUE(contains(message, c.what)) << message;
      EXPECT_TRUE(contains(message, "use printable characters")) << message;
      EXPECT_EQ(message.find('\x1b'), std::string::npos) << "the message itself must be safe";
      EXPECT_EQ(message.find('\n'), std::string::npos);
    }
  }
}

TEST(ProducerValidate, RejectsNamesThatAreNotUtf8) {
  NewEvent event = valid_event();
  event.aggregate_id = "ord\xff";
  EXPECT_TRUE(
      contains(rejection_of(event), "aggregate_id \"ord\\xff\" is not valid UTF-8 at byte 3"));
  event = valid_event();
  event.event_type = "\xc3\x28";  // a lead byte without its continuation
  EXPECT_TRUE(contains(rejection_of(event), "event_type"));
  event = valid_event();
  event.aggregate_type = "\xed\xa0\x80";  // an encoded surrogate: PostgreSQL refuses it too
  EXPECT_TRUE(contains(rejection_of(event), "not valid UTF-8 at byte 0"));
}

TEST(ProducerValidate, AcceptsPrintableUnicodeInNames) {
  NewEvent event = valid_event();
  event.aggregate_type = "Bestellung";
  event.aggregate_id =
      "M\xc3\xbcller-\xe6\xb3\xa8\xe6\x96\x87-\xf0\x9f\x93\xa6 #1";  // Müller-注文-📦 #1
  event.event_type = "\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7";     // Заказ
  EXPECT_NO_THROW(Producer().validate(event));
}

TEST(ProducerValidate, RejectsNulBytesInNames) {
  const std::string with_nul("ord\0er", 6);
  NewEvent event = valid_event();
  event.aggregate_type = with_nul;
  EXPECT_TRUE(contains(rejection_of(event), "aggregate_type contains a NUL byte at byte 3"));

  event = valid_event();
  event.aggregate_id = with_nul;
  EXPECT_TRUE(contains(rejection_of(event), "aggregate_id contains a NUL byte at byte 3"));

  event = valid_event();
  event.event_type = std::string(1, '\0');
  EXPECT_TRUE(contains(rejection_of(event), "event_type contains a NUL byte at byte 0"));
}

// libpq would send the document only up to the NUL and the JSON check stops there too, so
// '{"a":1}' would be stored without a word about the rest.
TEST(ProducerValidate, RejectsNulBytesInPayloadAndHeaders) {
  NewEvent event = valid_event();
  event.payload = std::string("{\"a\":1}\0{\"b\":2}", 15);
  EXPECT_TRUE(contains(rejection_of(event), "payload of"));
  EXPECT_TRUE(contains(rejection_of(event), "contains a NUL byte"));

  event = valid_event();
  event.headers = std::string("{}\0", 3);
  EXPECT_TRUE(contains(rejection_of(event), "headers of"));
  EXPECT_TRUE(contains(rejection_of(event), "contains a NUL byte"));
}

// --- schema_version ---

TEST(ProducerValidate, RejectsSchemaVersionZero) {
  NewEvent event = valid_event();
  event.schema_version = 0;
  EXPECT_TRUE(contains(rejection_of(event), "schema_version is 0; it must be 1 or more"));
}

TEST(ProducerValidate, RejectsNegativeSchemaVersion) {
  NewEvent event = valid_event();
  event.schema_version = -3;
  EXPECT_TRUE(contains(rejection_of(event), "schema_version is -3"));
}

// --- payload ---

TEST(ProducerValidate, RejectsPayloadThatIsNotJson) {
  for (const std::string payload : {"", "not json", "{", "{'a': 1}", "{\"a\": 1,}"}) {
    NewEvent event = valid_event();
    event.payload = payload;
    const std::string message = rejection_of(event);
    EXPECT_TRUE(contains(message, "payload")) << payload;
    EXPECT_TRUE(contains(message, "not valid JSON")) << payload;
  }
}

TEST(ProducerValidate, RejectionOfPayloadSaysWhichEvent) {
  NewEvent event = valid_event();
  event.payload = "nope";
  EXPECT_TRUE(contains(rejection_of(event), "payload of OrderPlaced 4711 is not valid JSON"));
}

TEST(ProducerValidate, RejectsPayloadWithTrailingGarbage) {
  NewEvent event = valid_event();
  event.payload = R"({"a": 1} {"b": 2})";
  EXPECT_TRUE(contains(rejection_of(event), "payload of OrderPlaced 4711 is not valid JSON"));
  event.payload = R"({"a": 1}x)";
  EXPECT_TRUE(contains(rejection_of(event), "payload of OrderPlaced 4711 is not valid JSON"));
}

TEST(ProducerValidate, RejectsPayloadContainingEscapedNul) {
  // Valid JSON, but jsonb cannot store U+0000, so PostgreSQL would abort the caller's transaction.
  NewEvent event = valid_event();
  event.payload = R"({"name": "a\u0000b"})";
  EXPECT_TRUE(
      contains(rejection_of(event), "contains \\u0000, which PostgreSQL jsonb cannot store"));
}

TEST(ProducerValidate, AcceptsEscapedBackslashFollowedByU0000) {
  NewEvent event = valid_event();
  event.payload = R"({"windows_path": "C:\\u0000"})";  // value: C:\u0000 (no NUL)
  EXPECT_NO_THROW(Producer().validate(event));
}

// --- headers ---

TEST(ProducerValidate, RejectsHeadersThatAreNotAnObject) {
  for (const std::string headers : {"[]", "\"x\"", "1", "null"}) {
    NewEvent event = valid_event();
    event.headers = headers;
    EXPECT_TRUE(contains(rejection_of(event), "headers of OrderPlaced 4711 must be a JSON object"))
        << headers;
  }
}

TEST(ProducerValidate, RejectsHeadersThatAreNotJson) {
  NewEvent event = valid_event();
  event.headers = "{";
  EXPECT_TRUE(contains(rejection_of(event), "headers of OrderPlaced 4711 is not valid JSON"));
  event.headers = "";
  EXPECT_TRUE(contains(rejection_of(event), "headers"));
}

TEST(ProducerValidate, RejectsHeaderValueThatIsNotAString) {
  NewEvent event = valid_event();
  event.headers = R"({"attempt": 2})";
  EXPECT_TRUE(contains(rejection_of(event),
                       "headers of OrderPlaced 4711 value of \"attempt\" must "
                       "be a string"));
}

// --- size ---

TEST(ProducerValidate, RejectsAMessageOverTheLimitSayingWhatCounts) {
  ProducerOptions options;
  options.max_payload_bytes = kValidEventFixedBytes + 21;
  NewEvent event = valid_event();
  event.payload = R"({"k":"0123456"})";  // jsonb: {"k": "0123456"}, 16 bytes
  event.headers = R"({"ab":"cd"})";      // with their lengths: 6 bytes
  const std::string message = rejection_of(event, options);
  EXPECT_TRUE(contains(message, "OrderPlaced 4711 would be a message of 208 bytes"));
  EXPECT_TRUE(contains(message, "payload 16 bytes as PostgreSQL's jsonb prints it"));
  EXPECT_TRUE(contains(message, "(the text given is 15 bytes;"));
  EXPECT_TRUE(contains(message, "headers 152, key 4, Kafka's framing 36; the limit is 207"));
  EXPECT_TRUE(contains(message, "max_payload_bytes"));
}

TEST(ProducerValidate, DefaultLimitStaysBelowKafkasMessageMaxBytes) {
  EXPECT_EQ(ProducerOptions().max_payload_bytes, 900U * 1024U);
  NewEvent event = valid_event();
  event.headers = "{}";
  const std::size_t largest_string = 900 * 1024 - kValidEventFixedBytes - 2;  // minus the quotes
  event.payload = "\"" + std::string(largest_string, 'x') + "\"";
  EXPECT_NO_THROW(Producer().validate(event));
  event.payload = "\"" + std::string(largest_string + 1, 'x') + "\"";
  EXPECT_TRUE(contains(rejection_of(event), "the limit is 921600"));
}

// Issue "Hardening" #9: the relay sends payload::text, which jsonb prints with a space after
// every comma. This array is 921,597 bytes as written, within 900 KiB, and 1,382,395 as sent:
// librdkafka refused it (message.max.bytes) and the relay quarantined it. 460,798 ones, 460,797
// separators of two bytes, two brackets: 1,382,394 bytes.
TEST(ProducerValidate, CountsThePayloadAsJsonbPrintsItNotAsWritten) {
  NewEvent event = valid_event();
  event.headers = "{}";
  event.payload = "[1";
  while (event.payload.size() < 921597 - 1) event.payload += ",1";
  event.payload += "]";
  ASSERT_EQ(event.payload.size(), 921597U);
  const std::string message = rejection_of(event);
  EXPECT_TRUE(contains(message, "payload 1382394 bytes as PostgreSQL's jsonb prints it"));
  EXPECT_TRUE(contains(message, "the text given is 921597 bytes"));
}

// numeric_out prints every digit: eight bytes of JSON, 131072 bytes as sent.
TEST(ProducerValidate, CountsNumbersAsNumericPrintsThem) {
  NewEvent event = valid_event();
  event.headers = "{}";
  event.payload = "[1e131071,1e131071,1e131071,1e131071,1e131071,1e131071,1e131071,1e131071]";
  EXPECT_TRUE(contains(rejection_of(event), "payload 1048592 bytes as PostgreSQL's jsonb prints"))
      << "8 x 131072 digits, 2 brackets, 7 separators of 2 bytes";
  event.payload = R"({"x": 1e999})";  // beyond a double, within numeric: jsonb stores it
  EXPECT_NO_THROW(Producer().validate(event));
}

// The other way round: what jsonb drops does not count against the limit.
TEST(ProducerValidate, AcceptsTextThatJsonbStoresSmaller) {
  NewEvent event = valid_event();
  event.headers = "{}";
  event.payload = "{\"a\": 1" + std::string(1024 * 1024, ' ') + "}";  // 1 MiB of blanks
  EXPECT_NO_THROW(Producer().validate(event));
  event.payload = R"({"big": ")" + std::string(950 * 1024, 'x') + R"(", "big": "small"})";
  EXPECT_NO_THROW(Producer().validate(event)) << "jsonb keeps only the last \"big\"";
}

// --- event_id ---

TEST(ProducerValidate, RejectsNilEventId) {
  NewEvent event = valid_event();
  event.event_id = EventId();
  EXPECT_TRUE(contains(rejection_of(event), "event_id is the nil UUID"));
}

// --- enqueue without a connection ---

TEST(ProducerEnqueue, NullConnectionIsInvalidArgument) {
  const Producer producer;
  try {
    producer.enqueue(nullptr, valid_event());
    FAIL() << "enqueue(nullptr, ...) returned";
  } catch (const InvalidArgument& error) {
    EXPECT_TRUE(contains(error.what(), "connection is null"));
  }
}

TEST(ProducerEnqueue, NullConnectionIsCheckedForABatchToo) {
  const Producer producer;
  const std::vector<NewEvent> events = {valid_event(), valid_event()};
  try {
    producer.enqueue(nullptr, std::span<const NewEvent>(events));
    FAIL() << "enqueue(nullptr, batch) returned";
  } catch (const InvalidArgument& error) {
    EXPECT_TRUE(contains(error.what(), "connection is null"));
  }
}

// --- trace context and delayed delivery ---

TEST(ProducerValidate, AcceptsAW3CTraceparent) {
  NewEvent event = valid_event();
  event.headers = "{}";
  event.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_NO_THROW(Producer().validate(event));
}

TEST(ProducerValidate, RejectsATraceparentThatIsNotAW3CTraceContext) {
  for (const char* bad : {"garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
                          "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"}) {
    NewEvent event = valid_event();
    event.headers = "{}";
    event.traceparent = bad;
    EXPECT_TRUE(contains(rejection_of(event), "traceparent")) << bad;
  }
}

TEST(ProducerValidate, RejectsATraceparentBesideADifferentTraceparentHeader) {
  NewEvent event = valid_event();  // its headers carry another traceparent
  event.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_TRUE(contains(rejection_of(event), "different \"traceparent\" header"));
}

TEST(ProducerValidate, RejectsADeliverAfterOutOfRangeOrWithoutARow) {
  NewEvent event = valid_event();
  event.deliver_after = std::chrono::milliseconds(-1);
  EXPECT_TRUE(contains(rejection_of(event), "deliver_after"));
  event.deliver_after = kMaxDeliverAfter + std::chrono::milliseconds(1);
  EXPECT_TRUE(contains(rejection_of(event), "deliver_after"));
  event.deliver_after = std::chrono::minutes(5);
  EXPECT_NO_THROW(Producer().validate(event));
  ProducerOptions table_less;
  table_less.table_less = true;
  EXPECT_TRUE(contains(rejection_of(event, table_less), "table-less"));
}

}  // namespace
}  // namespace outbox
