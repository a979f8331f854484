#include "outbox/rabbitmq_audit.hpp"

#include <fmt/format.h>
#include <sys/time.h>

#include "ops/audit_rows.hpp"
#include "outbox/error.hpp"
#include "rabbitmq/amqp_common.hpp"

namespace outbox {
namespace {

constexpr std::uint16_t kPrefetch = 1000;
// The stream is read until nothing more arrives for this long (a stream consumer never ends).
constexpr std::chrono::milliseconds kQuiet{1500};

bool has_key(const amqp_table_t& table, std::string_view key) {
  for (int i = 0; i < table.num_entries; ++i) {
    const amqp_bytes_t& name = table.entries[i].key;
    if (std::string_view(static_cast<const char*>(name.bytes), name.len) == key) return true;
  }
  return false;
}

// Starts reading the stream queue from `from_ms` (whole seconds: the x-stream-offset timestamp).
void consume_from(rabbitmq::Connection& connection, const RabbitMqAuditOptions& options,
                  std::int64_t from_ms) {
  amqp_connection_state_t state = connection.get();
  const amqp_channel_t channel = rabbitmq::Connection::kChannel;
  amqp_queue_declare(state, channel, rabbitmq::bytes(options.stream_queue), /*passive=*/1, 0, 0, 0,
                     amqp_empty_table);
  const amqp_rpc_reply_t declared = amqp_get_rpc_reply(state);
  if (rabbitmq::reply_code(declared) == AMQP_NOT_FOUND) {
    throw InvalidArgument(
        "audit: the stream queue " + options.stream_queue +
        " does not exist: declare a queue with x-queue-type=stream bound to the relays' exchange "
        "with \"#\" (--rabbitmq-audit-queue names it)");
  }
  connection.check(declared, "cannot find queue " + options.stream_queue);
  amqp_basic_qos(state, channel, 0, kPrefetch, 0);
  connection.check(amqp_get_rpc_reply(state), "basic.qos");
  rabbitmq::Table arguments;
  arguments.add_timestamp("x-stream-offset",
                          static_cast<std::uint64_t>(std::max<std::int64_t>(from_ms / 1000, 0)));
  amqp_basic_consume(state, channel, rabbitmq::bytes(options.stream_queue), amqp_empty_bytes, 0, 0,
                     0, arguments.get());
  const amqp_rpc_reply_t consuming = amqp_get_rpc_reply(state);
  if (rabbitmq::reply_code(consuming) == AMQP_PRECONDITION_FAILED) {
    // RabbitMQ 3.10 refuses x-stream-offset on a classic or quorum queue.
    throw InvalidArgument(
        "audit: " + options.stream_queue +
        " is not a stream queue (x-queue-type=stream): " + rabbitmq::reply_text(consuming));
  }
  connection.check(consuming, "cannot read " + options.stream_queue);
}

// Every message of the stream queue from `from_ms`, each with whether its timestamp is in the
// window.
detail::AuditedMessages read_stream(const RabbitMqAuditOptions& options, std::int64_t from_ms,
                                    std::int64_t begin_ms, std::int64_t end_ms) {
  rabbitmq::Connection connection(rabbitmq::parse_url(options.url), "outbox-audit",
                                  std::chrono::milliseconds(5000), std::chrono::seconds(0));
  consume_from(connection, options, from_ms);
  amqp_connection_state_t state = connection.get();
  detail::AuditedMessages messages;
  const auto deadline = std::chrono::steady_clock::now() + options.read_timeout;
  // Read until a message sent after the read began (a live stream never goes quiet), or until
  // nothing comes for kQuiet (the end of a stream no relay publishes to now).
  const std::int64_t started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count();
  for (;;) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw BrokerError(fmt::format("audit: stream queue {} not read to its end within {} ms",
                                    options.stream_queue, options.read_timeout.count()),
                        0, true);
    }
    amqp_envelope_t envelope{};
    const timeval wait{static_cast<time_t>(kQuiet.count() / 1000),
                       static_cast<suseconds_t>(kQuiet.count() % 1000 * 1000)};
    const amqp_rpc_reply_t reply = amqp_consume_message(state, &envelope, &wait, 0);
    if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        reply.library_error == AMQP_STATUS_TIMEOUT) {
      break;
    }
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
      throw BrokerError(
          "audit: reading " + options.stream_queue + ": " + rabbitmq::reply_text(reply), 0, true);
    }
    const amqp_basic_properties_t& properties = envelope.message.properties;
    if ((properties._flags & AMQP_BASIC_HEADERS_FLAG) == 0 ||
        !has_key(properties.headers, "x-stream-offset")) {
      // A classic or quorum queue ignores x-stream-offset and hands out its messages: taking
      // them would take them from their consumers. Nothing is acknowledged; closing the
      // connection gives them back.
      amqp_destroy_envelope(&envelope);
      throw InvalidArgument("audit: " + options.stream_queue +
                            " is not a stream queue (x-queue-type=stream): its messages are its "
                            "consumers', and the audit gave back the one it was handed");
    }
    const std::string id = (properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0
                               ? rabbitmq::to_string(properties.message_id)
                               : std::string();
    const std::int64_t at_ms = (properties._flags & AMQP_BASIC_TIMESTAMP_FLAG) != 0
                                   ? static_cast<std::int64_t>(properties.timestamp) * 1000
                                   : -1;
    messages.emplace_back(EventId::parse(id).value_or(EventId{}),
                          at_ms >= begin_ms && at_ms < end_ms);
    const bool past_start = at_ms >= started_ms + 1000;  // timestamps are whole seconds
    // Acknowledging a stream's message removes nothing; it lets the next ones come.
    amqp_basic_ack(state, rabbitmq::Connection::kChannel, envelope.delivery_tag, 0);
    amqp_destroy_envelope(&envelope);
    amqp_maybe_release_buffers(state);
    if (past_start) break;
  }
  return messages;
}

}  // namespace

AuditReport audit_rabbitmq_stream(const RabbitMqAuditOptions& options) {
  detail::check_audit_window(options);
  if (options.stream_queue.empty()) {
    throw InvalidArgument("audit needs the stream queue to read (--rabbitmq-audit-queue)");
  }
  return detail::run_audit(
      options, [](const Event&) { return true; },
      [&](std::int64_t from_ms, std::int64_t begin_ms, std::int64_t end_ms) {
        return read_stream(options, from_ms, begin_ms, end_ms);
      });
}

}  // namespace outbox
