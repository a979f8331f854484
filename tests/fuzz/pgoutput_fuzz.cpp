// The CDC relay's decoders (src/cdc/pgoutput.hpp), fed what a walsender could send: any bytes,
// read as a CopyData frame, as a pgoutput message and as a standby status update, give a value or
// a DecodeError whose message is printable and whose offset lies inside the input, never a crash
// or a read outside the buffer (ASan: libFuzzer hands over a buffer of exactly `size` bytes).
// Whatever decodes encodes back (tests/support/pgoutput_writer.hpp) to the very same bytes, so
// the decoder neither skips nor invents a byte, and its views stay inside the input.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "cdc/pgoutput.hpp"
#include "fuzz_common.hpp"
#include "support/pgoutput_writer.hpp"

namespace {

using namespace outbox::cdc;
using outbox::fuzz::fail;

void expect_inside(std::string_view view, std::string_view input) {
  if (view.empty()) return;
  if (view.data() < input.data() || view.data() + view.size() > input.data() + input.size()) {
    fail("a view that points outside the input", input);
  }
}

void expect_error(const DecodeError& error, std::string_view input) {
  outbox::fuzz::expect_printable_message(error.message, input);
  if (error.offset > input.size()) fail("an error offset past the end of the input", input);
}

void expect_round_trip(const std::string& encoded, std::string_view input) {
  if (encoded != input) fail("decodes to a value that encodes to other bytes", input);
}

void check_message(std::string_view input) {
  const PgOutputMessage message = decode_pgoutput(input);
  if (const auto* error = std::get_if<DecodeError>(&message)) return expect_error(*error, input);
  if (const auto* ignored = std::get_if<Ignored>(&message)) {
    if (ignored->kind != input.front() ||
        std::string_view("DTYO").find(ignored->kind) == std::string_view::npos) {
      fail("an Ignored of the wrong kind", input);
    }
    return;
  }
  if (const auto* insert = std::get_if<Insert>(&message)) {
    for (const TupleColumn& column : insert->columns) expect_inside(column.value, input);
  }
  if (const auto* update = std::get_if<Update>(&message)) {
    for (const TupleColumn& column : update->old_columns) expect_inside(column.value, input);
    for (const TupleColumn& column : update->columns) expect_inside(column.value, input);
  }
  if (const auto* logical = std::get_if<LogicalMessage>(&message)) {
    expect_inside(logical->prefix, input);
    expect_inside(logical->content, input);
  }
  if (const auto* relation = std::get_if<Relation>(&message)) {
    const auto found = find_columns(*relation, {"event_id", "payload"});
    if (const auto* missing = std::get_if<MissingColumn>(&found)) {
      outbox::fuzz::expect_printable_message(missing->message, input);
    }
  }
  std::visit(
      [&](const auto& value) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(value)>, DecodeError> &&
                      !std::is_same_v<std::decay_t<decltype(value)>, Ignored>) {
          expect_round_trip(wire::encode(value), input);
        }
      },
      message);
}

void check_frame(std::string_view input) {
  const CopyDataMessage frame = decode_copy_data(input);
  if (const auto* error = std::get_if<DecodeError>(&frame)) return expect_error(*error, input);
  if (const auto* keepalive = std::get_if<PrimaryKeepalive>(&frame)) {
    return expect_round_trip(wire::encode(*keepalive), input);
  }
  const auto& data = std::get<XLogData>(frame);
  expect_inside(data.payload, input);
  expect_round_trip(wire::encode(data), input);
  if (!data.payload.empty()) check_message(data.payload);
}

void check_status_update(std::string_view input) {
  const auto update = decode_standby_status_update(input);
  if (const auto* error = std::get_if<DecodeError>(&update)) return expect_error(*error, input);
  const auto encoded = encode_standby_status_update(std::get<StandbyStatusUpdate>(update));
  if (std::string_view(encoded.data(), encoded.size()) != input) {
    fail("a status update that encodes to other bytes", input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check_frame(input);
  check_message(input);
  check_status_update(input);
  return 0;
}
