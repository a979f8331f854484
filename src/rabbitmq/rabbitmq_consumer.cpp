// RabbitMqInboxConsumer: take up to a prefetch of deliveries from a single-active-consumer queue,
// apply them through the inbox in one transaction, then acknowledge them with one basic.ack; a
// failed batch goes back to the queue whole with one basic.nack.

#include "outbox/rabbitmq_consumer.hpp"

#include <fmt/format.h>
#include <sys/time.h>

#include <atomic>
#include <charconv>

#include "common/fault.hpp"
#include "common/health_board.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "inbox/apply_batch.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "rabbitmq/amqp_common.hpp"

namespace outbox {
namespace {

template <typename Int>
Int to_int(const std::string& text) {
  Int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

void check_options(const RabbitMqConsumerOptions& options) {
  rabbitmq::parse_url(options.url);
  if (options.queue.empty() || options.queue.size() > 255 || options.queue.starts_with("amq.")) {
    throw ConfigError(
        "RabbitMQ consumer: the queue name must be 1 to 255 bytes, not starting "
        "with \"amq.\", not \"" +
        detail::printable(options.queue, 100) + "\"");
  }
  if (options.queue_type != "quorum" && options.queue_type != "classic") {
    throw ConfigError("RabbitMQ consumer: the queue type must be quorum or classic, not \"" +
                      detail::printable(options.queue_type, 50) +
                      "\" (a stream queue has no single active consumer here)");
  }
  if (options.batch < 1 || options.batch > 10000) {
    throw ConfigError(
        fmt::format("RabbitMQ consumer: batch must be 1 to 10000, not {}", options.batch));
  }
  if (options.retry_backoff_base.count() <= 0 ||
      options.retry_backoff_max < options.retry_backoff_base) {
    throw ConfigError(
        "RabbitMQ consumer: retry_backoff_base must be positive and retry_backoff_max at least "
        "as large");
  }
}

}  // namespace

class RabbitMqInboxConsumer::Impl {
 public:
  Impl(RabbitMqConsumerOptions options, Effect effect)
      : options_(std::move(options)),
        effect_(std::move(effect)),
        inbox_(options_.schema,
               options_.consumer_name.empty() ? options_.queue : options_.consumer_name,
               options_.ordering, options_.upcasters),
        health_("rabbitmq consumer " + options_.queue),
        endpoint_(rabbitmq::parse_url(options_.url)),
        database_(pg::Connection::open(options_.database_url, "outbox-consumer")) {
    check_options(options_);
    if (!effect_) throw InvalidArgument("RabbitMQ consumer: the effect is empty");
  }

  std::size_t poll(std::chrono::milliseconds max_wait) {
    if (!database_.healthy()) {
      database_ = pg::Connection::open(options_.database_url, "outbox-consumer");
      ++counters_.reconnects;
    }
    inbox_.tend(database_.get(), effect_, counters_, effect_threw_);
    if (connection_ == nullptr) subscribe();
    std::vector<ConsumedEvent> events;
    std::uint64_t last_tag = 0;
    std::size_t received = 0;
    // The first delivery within max_wait; then what has already arrived, up to the prefetch.
    for (auto wait = max_wait; received < static_cast<std::size_t>(options_.batch);
         wait = std::chrono::milliseconds(0)) {
      amqp_envelope_t envelope{};
      if (!next_delivery(wait, envelope)) break;
      ++received;
      last_tag = envelope.delivery_tag;
      if (envelope.redelivered != 0) ++counters_.redeliveries;
      ConsumedEvent event = decode(envelope);
      amqp_destroy_envelope(&envelope);
      if (event.event_id.is_nil()) {
        ++counters_.rejected;
        detail::log().error(
            "rabbitmq consumer: a message on {} (tag {}) has no valid event id "
            "(message_id); skipped",
            detail::printable(event.topic), event.offset);
        continue;
      }
      events.push_back(std::move(event));
    }
    amqp_maybe_release_buffers(connection_->get());
    if (received == 0) return 0;
    counters_.received += received;
    if (health_.health() == Health::broker_unavailable) health_.set(Health::running);
    apply(events, last_tag);
    return received;
  }

  void run() {
    detail::run_until_stopped(health_, options_.retry_backoff_base, options_.retry_backoff_max,
                              stop_, effect_threw_, [this] {
                                effect_threw_ = false;
                                poll(std::chrono::milliseconds(200));
                              });
  }

  void request_stop() noexcept { stop_.store(true); }

  RabbitMqConsumerStats stats() const {
    RabbitMqConsumerStats s;
    OUTBOX_STAT_COPY(OUTBOX_RABBITMQ_CONSUMER_STATS, counters_, s);
    std::tie(s.health, s.last_error) = health_.snapshot();
    return s;
  }

 private:
  // Declares the queue (durable, single active consumer), binds it, and starts consuming with a
  // prefetch of one batch. A queue that exists with other arguments is refused by the broker
  // (406): a ConfigError that says so.
  void subscribe() {
    auto connection =
        std::make_unique<rabbitmq::Connection>(endpoint_, "outbox-consumer-" + options_.queue,
                                               options_.connect_timeout, options_.heartbeat);
    amqp_connection_state_t state = connection->get();
    const amqp_channel_t channel = rabbitmq::Connection::kChannel;
    rabbitmq::Table arguments;
    arguments.add_text("x-queue-type", options_.queue_type);
    arguments.add_bool("x-single-active-consumer", true);
    amqp_queue_declare(state, channel, rabbitmq::bytes(options_.queue), 0, /*durable=*/1, 0, 0,
                       arguments.get());
    const amqp_rpc_reply_t declared = amqp_get_rpc_reply(state);
    if (rabbitmq::reply_code(declared) == AMQP_PRECONDITION_FAILED) {
      throw ConfigError(fmt::format(
          "RabbitMQ queue {} exists with other settings ({}): outbox needs a durable {} queue "
          "with x-single-active-consumer, or two consumers would split an aggregate's events; "
          "delete it (rabbitmqctl delete_queue {}) or use another queue",
          options_.queue, rabbitmq::reply_text(declared), options_.queue_type, options_.queue));
    }
    connection->check(declared, "cannot declare queue " + options_.queue);
    for (const std::string& pattern : options_.bindings) {
      amqp_queue_bind(state, channel, rabbitmq::bytes(options_.queue),
                      rabbitmq::bytes(options_.exchange), rabbitmq::bytes(pattern),
                      amqp_empty_table);
      const amqp_rpc_reply_t bound = amqp_get_rpc_reply(state);
      if (rabbitmq::reply_code(bound) == AMQP_NOT_FOUND) {
        // Consumers often start before the relay that declares the exchange: wait for it.
        throw BrokerError(
            "RabbitMQ consumer: exchange " + options_.exchange + " does not exist (yet)", 0, true);
      }
      connection->check(bound, "cannot bind queue " + options_.queue + " with " + pattern);
    }
    amqp_basic_qos(state, channel, 0, static_cast<std::uint16_t>(std::min(options_.batch, 65535)),
                   0);
    connection->check(amqp_get_rpc_reply(state), "basic.qos");
    amqp_basic_consume(state, channel, rabbitmq::bytes(options_.queue), amqp_empty_bytes, 0,
                       /*no_ack=*/0, /*exclusive=*/0, amqp_empty_table);
    connection->check(amqp_get_rpc_reply(state), "cannot consume from " + options_.queue);
    connection_ = std::move(connection);
    detail::log().info("rabbitmq consumer: reading queue {} ({} queue, single active consumer)",
                       options_.queue, options_.queue_type);
  }

  // One delivery, waiting up to `wait`; false when none came. A broken connection or a consumer
  // the broker cancelled (its queue deleted) drops the connection and throws BrokerError: what
  // was delivered and not acknowledged goes back to the queue, first.
  bool next_delivery(std::chrono::milliseconds wait, amqp_envelope_t& envelope) {
    amqp_connection_state_t state = connection_->get();
    const timeval tv{static_cast<time_t>(wait.count() / 1000),
                     static_cast<suseconds_t>((wait.count() % 1000) * 1000)};
    const amqp_rpc_reply_t reply = amqp_consume_message(state, &envelope, &tv, 0);
    if (reply.reply_type == AMQP_RESPONSE_NORMAL) return true;
    if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        reply.library_error == AMQP_STATUS_TIMEOUT) {
      return false;
    }
    std::string why = rabbitmq::reply_text(reply);
    if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        reply.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      // Another frame than a delivery: a basic.cancel, a channel or connection closed.
      amqp_frame_t frame{};
      if (amqp_simple_wait_frame_noblock(state, &frame, &tv) == AMQP_STATUS_OK &&
          frame.frame_type == AMQP_FRAME_METHOD) {
        why = frame.payload.method.id == AMQP_BASIC_CANCEL_METHOD
                  ? "the broker cancelled the consumer (queue deleted?)"
                  : fmt::format("the broker sent method 0x{:08x}", frame.payload.method.id);
        if (frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
          connection_->acknowledge_connection_close();
        }
      }
    }
    connection_.reset();
    ++counters_.reconnects;
    throw BrokerError("RabbitMQ consumer: " + why, 0, true);
  }

  ConsumedEvent decode(const amqp_envelope_t& envelope) const {
    const amqp_basic_properties_t& properties = envelope.message.properties;
    const bool has_headers = (properties._flags & AMQP_BASIC_HEADERS_FLAG) != 0;
    const auto header = [&](std::string_view name) {
      return has_headers ? rabbitmq::table_text(properties.headers, name) : std::string();
    };
    ConsumedEvent event;
    const std::string id = (properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0
                               ? rabbitmq::to_string(properties.message_id)
                               : header("event_id");
    event.event_id = EventId::parse(id).value_or(EventId{});
    event.aggregate_type = header("aggregate_type");
    event.aggregate_id = header("aggregate_id");
    event.aggregate_sequence = to_int<std::int64_t>(header("aggregate_sequence"));
    event.event_type = header("event_type");
    event.schema_version = to_int<std::int32_t>(header("schema_version"));
    event.traceparent = header("traceparent");
    event.payload = rabbitmq::to_string(envelope.message.body);
    event.topic = rabbitmq::to_string(envelope.routing_key);
    event.partition = -1;
    event.offset = static_cast<std::int64_t>(envelope.delivery_tag);
    return event;
  }

  void apply(const std::vector<ConsumedEvent>& events, std::uint64_t last_tag) {
    try {
      const auto counts = inbox_.apply(database_.get(), events, effect_, effect_threw_);
      detail::count_batch(counters_, counts);
    } catch (...) {
      ++counters_.failed_batches;
      if (effect_threw_) ++counters_.effect_failures;
      // Back whole and in order, before anything after it: the connection is closed, which
      // returns every delivery not acknowledged, this batch and those already on their way to
      // this consumer behind it. A basic.nack of the batch would return the batch alone, and
      // the deliveries behind it would be applied before it comes again.
      connection_.reset();
      throw;
    }
    OUTBOX_FAULT(fault::kConsumerAfterCommitBeforeOffset);
    if (amqp_basic_ack(connection_->get(), rabbitmq::Connection::kChannel, last_tag,
                       /*multiple=*/1) != AMQP_STATUS_OK) {
      // Not acknowledged: delivered again when the broker sees the connection gone; the inbox
      // makes the repeat a no-op.
      connection_.reset();
      ++counters_.reconnects;
    }
  }

  RabbitMqConsumerOptions options_;
  Effect effect_;
  detail::InboxApplier inbox_;
  detail::HealthBoard health_;
  rabbitmq::Endpoint endpoint_;
  std::unique_ptr<rabbitmq::Connection> connection_;
  pg::Connection database_;
  std::atomic<bool> stop_{false};
  bool effect_threw_ = false;
  struct Counters {
    OUTBOX_RABBITMQ_CONSUMER_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

RabbitMqInboxConsumer::RabbitMqInboxConsumer(RabbitMqConsumerOptions options, Effect effect)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(effect))) {}
RabbitMqInboxConsumer::~RabbitMqInboxConsumer() = default;
std::size_t RabbitMqInboxConsumer::poll(std::chrono::milliseconds max_wait) {
  return impl_->poll(max_wait);
}
void RabbitMqInboxConsumer::run() { impl_->run(); }
void RabbitMqInboxConsumer::request_stop() noexcept { impl_->request_stop(); }
RabbitMqConsumerStats RabbitMqInboxConsumer::stats() const { return impl_->stats(); }

std::vector<StatSample> stat_samples(const RabbitMqConsumerStats& stats) {
  return OUTBOX_STAT_SAMPLES(OUTBOX_RABBITMQ_CONSUMER_STATS, stats, detail::kPlain);
}

}  // namespace outbox
