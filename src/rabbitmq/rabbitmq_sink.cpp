// The RabbitMQ sink over rabbitmq-c: one connection and one confirm-mode channel, driven from the
// relay's thread only (rabbitmq-c is not thread safe). send() writes basic.publish; poll() reads
// the broker's frames (basic.return, basic.ack, basic.nack, connection.blocked) and turns them
// into reports.

#include "outbox/rabbitmq_sink.hpp"

#include <fmt/format.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <map>
#include <thread>
#include <unordered_set>

#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "outbox/error.hpp"
#include "rabbitmq/amqp_common.hpp"
#include "rabbitmq/rabbitmq_message.hpp"
#include "sinks/key_template.hpp"

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kMaxPartitions = 4096;
constexpr std::size_t kMaxRoutingKey = 255;  // an AMQP short string
// The headers table rides in the content header frame (frame_max 128 KiB) with the other
// properties; rabbitmq-c fails a publish whose properties do not fit, after its method frame.
constexpr std::size_t kMaxHeaderBytes = 120 * 1024;
// A publish's frames beside its body and headers: method, content header, frame ends.
constexpr std::size_t kFrameOverhead = 1024;

void check_options(const RabbitMqSinkOptions& options) {
  rabbitmq::parse_url(options.url);
  detail::check_key_template(options.routing_key_template, "RabbitMQ routing key",
                             "--rabbitmq-partitions", "{aggregate_type}.{partition}");
  if (options.partitions < 1 || options.partitions > kMaxPartitions) {
    throw ConfigError(fmt::format("RabbitMQ: partitions must be 1 to {}, not {}", kMaxPartitions,
                                  options.partitions));
  }
  if (options.exchange.empty() || options.exchange.size() > kMaxRoutingKey ||
      options.exchange.starts_with("amq.")) {
    throw ConfigError("RabbitMQ exchange \"" + detail::printable(options.exchange, 100) +
                      "\" is not usable: give a name of 1 to 255 bytes that does not start with "
                      "\"amq.\" (the default exchange \"\" routes by queue name and is not "
                      "supported)");
  }
  if (options.confirm_timeout.count() <= 0 || options.heartbeat.count() < 0) {
    throw ConfigError("RabbitMQ: the confirm timeout must be above 0");
  }
  if (options.max_confirm_timeout.count() > 0 &&
      options.confirm_timeout >= options.max_confirm_timeout) {
    throw ConfigError(fmt::format(
        "RabbitMQ: the confirm timeout ({} ms) must end before the claim's lease ({} ms), or "
        "another relay could publish the event and its successor first; lower "
        "--rabbitmq-confirm-timeout or raise --lease-ms",
        options.confirm_timeout.count(), options.max_confirm_timeout.count()));
  }
}

timeval to_timeval(std::chrono::milliseconds duration) {
  const auto ms = std::max<std::int64_t>(duration.count(), 0);
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

// The RabbitMQ sink's own statistics (outbox/stats.hpp; Sink::stats()).
#define OUTBOX_RABBITMQ_SINK_STATS(X)                                                              \
  X(rabbitmq_returns, counter, when_set, "outbox_relay_rabbitmq_returns_total",                    \
    "{} RabbitMQ return(s)",                                                                       \
    "Messages the broker returned as unroutable (no queue bound for the routing key): failed, "    \
    "retried with backoff.")                                                                       \
  X(rabbitmq_nacks, counter, when_set, "outbox_relay_rabbitmq_nacks_total", "{} RabbitMQ nack(s)", \
    "Messages the broker refused with basic.nack: failed, retried.")                               \
  X(rabbitmq_confirm_timeouts, counter, when_set, "outbox_relay_rabbitmq_confirm_timeouts_total",  \
    "{} RabbitMQ confirm timeout(s)",                                                              \
    "Sends with no confirm within the confirm timeout, or unconfirmed when the connection was "    \
    "lost: unknown outcomes, sent again (the consumer's inbox absorbs a second copy).")            \
  X(rabbitmq_send_stalls, counter, when_set, "outbox_relay_rabbitmq_send_stalls_total",            \
    "{} RabbitMQ send stall(s)",                                                                   \
    "Sends refused because the broker stopped reading the connection (its socket buffer stayed "   \
    "full): flow control, an alarm, a stalled broker. Retried.")                                   \
  X(rabbitmq_reconnects, counter, when_set, "outbox_relay_rabbitmq_reconnects_total",              \
    "RabbitMQ reconnected {} time(s)", "New connections to the broker after a lost one.")          \
  X(rabbitmq_blocked, flag, when_set, "outbox_relay_rabbitmq_blocked",                             \
    "RabbitMQ blocks publishers",                                                                  \
    "1 while the broker blocks publishers (a memory or disk alarm): sends fail until it "          \
    "lifts.")

class RabbitMqSink final : public Sink {
 public:
  explicit RabbitMqSink(const RabbitMqSinkOptions& options)
      : options_(options), endpoint_(rabbitmq::parse_url(options.url)) {
    check_options(options_);
  }

  ~RabbitMqSink() override {
    // Unconfirmed sends have no relay left to record them: their rows are retaken after their
    // lease. Closing says goodbye to the broker, waiting half a second at most.
    connection_.reset();
  }

  void send(const Event& event, std::uint64_t ticket) override {
    const std::string key =
        detail::render_key(options_.routing_key_template, event, options_.partitions);
    if (key.size() > kMaxRoutingKey) {
      report(ticket, DeliveryOutcome::permanent_failure,
             fmt::format("RabbitMQ routing key \"{}...\" rendered from the event is longer than "
                         "255 bytes",
                         detail::printable(key, 60)));
      return;
    }
    if (const std::string not_ready = ensure_connected(); !not_ready.empty()) {
      report(ticket, DeliveryOutcome::retryable_failure, not_ready);
      return;
    }
    if (counters_.rabbitmq_blocked.load()) {
      report(ticket, DeliveryOutcome::retryable_failure,
             "RabbitMQ blocks publishers (" + blocked_reason_ +
                 "): a memory or disk alarm on the broker; sends wait until it lifts");
      return;
    }
    const std::string id = event.event_id.to_string();
    rabbitmq::Table headers = rabbitmq::message_headers(event, id, options_.cloudevents_source);
    if (headers.encoded_size() > kMaxHeaderBytes) {
      report(ticket, DeliveryOutcome::permanent_failure,
             fmt::format("the event's headers take {} bytes, more than the {} an AMQP frame "
                         "holds beside the message's properties",
                         headers.encoded_size(), kMaxHeaderBytes));
      return;
    }
    if (const std::string full = wait_for_room(event.payload.size() + headers.encoded_size());
        !full.empty()) {
      report(ticket, DeliveryOutcome::retryable_failure, full);
      return;
    }
    const amqp_basic_properties_t properties = rabbitmq::message_properties(event, id, headers);
    const int status = amqp_basic_publish(connection_->get(), rabbitmq::Connection::kChannel,
                                          rabbitmq::bytes(options_.exchange), rabbitmq::bytes(key),
                                          /*mandatory=*/1, /*immediate=*/0, &properties,
                                          rabbitmq::bytes(event.payload));
    if (status == AMQP_STATUS_TABLE_TOO_BIG) {
      // The method frame went out without its content: the channel is unusable. This event can
      // never be sent as it is; what was unconfirmed before it is unknown.
      report(ticket, DeliveryOutcome::permanent_failure,
             "the event's headers do not fit an AMQP frame");
      lose_connection("publish of an event with oversized headers");
      return;
    }
    pending_.emplace(next_tag_++,
                     Pending{ticket, id, key, Clock::now() + options_.confirm_timeout});
    if (status != AMQP_STATUS_OK) {
      // Part of it may have reached the broker: what is unconfirmed is unknown.
      lose_connection("publish failed: " + rabbitmq::status_text(status));
    }
  }

  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    const auto until = Clock::now() + max_wait;
    while (connection_ != nullptr) {
      const auto now = Clock::now();
      // Frames already read are taken without waiting once there is something to report.
      const auto wait = ready_.empty() && now < until
                            ? std::chrono::duration_cast<std::chrono::milliseconds>(until - now)
                            : std::chrono::milliseconds(0);
      if (!read_frame(std::min(wait, time_to_next_deadline(now)))) break;
    }
    if (connection_ == nullptr && ready_.empty() && max_wait.count() > 0) {
      std::this_thread::sleep_for(std::min(max_wait, std::chrono::milliseconds(100)));
    }
    expire_overdue(Clock::now());
    reports.insert(reports.end(), std::make_move_iterator(ready_.begin()),
                   std::make_move_iterator(ready_.end()));
    ready_.clear();
  }

  [[nodiscard]] std::size_t in_flight() const override { return pending_.size() + ready_.size(); }
  [[nodiscard]] std::string describe() const override {
    return "rabbitmq(" + rabbitmq::describe(endpoint_) + " exchange " + options_.exchange + ")";
  }
  [[nodiscard]] std::vector<StatSample> stats() const override {
    return OUTBOX_STAT_SAMPLES(OUTBOX_RABBITMQ_SINK_STATS, counters_, detail::kRelaxed);
  }

 private:
  struct Pending {
    std::uint64_t ticket = 0;
    std::string event_id;
    std::string routing_key;
    Clock::time_point deadline{};
  };

  // Empty when the socket's buffer has room for `bytes` more (and their frames' overhead), after
  // reading the broker's frames for up to send_room_wait while it has not; else why not.
  // rabbitmq-c writes a publish waiting for ever, so a broker that stopped reading (a memory or
  // disk alarm blocks publishers' connections; a stalled node) would hold the relay's thread.
  std::string wait_for_room(std::size_t bytes) {
    const auto until = Clock::now() + options_.send_room_wait;
    for (;;) {
      const int fd = amqp_get_sockfd(connection_->get());
      int queued = 0;
      int buffer = 0;
      socklen_t size = sizeof(buffer);
      if (fd < 0 || ::ioctl(fd, SIOCOUTQ, &queued) != 0 ||
          ::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, &size) != 0) {
        return {};  // cannot tell: write, as rabbitmq-c would
      }
      // Bytes the broker has not acknowledged at the TCP level yet: 0 when it keeps up. The
      // kernel reports twice the payload room it grants (the rest is its book-keeping). A
      // message larger than the room goes when nothing is queued: it blocks only while the
      // broker reads it.
      if (queued == 0 || static_cast<std::size_t>(queued) + bytes + kFrameOverhead <=
                             static_cast<std::size_t>(buffer / 2)) {
        return {};
      }
      const auto now = Clock::now();
      if (now >= until) break;
      read_frame(std::chrono::duration_cast<std::chrono::milliseconds>(until - now) / 4 +
                 std::chrono::milliseconds(1));
      if (connection_ == nullptr) return last_connect_error_;
    }
    counters_.rabbitmq_send_stalls.fetch_add(1, std::memory_order_relaxed);
    return fmt::format(
        "RabbitMQ is not reading from the connection (its socket buffer stayed full for {} ms): "
        "flow control, a memory or disk alarm, or a stalled broker",
        options_.send_room_wait.count());
  }

  // Empty when a confirm-mode channel is open; else why not. Connects at most once a second.
  std::string ensure_connected() {
    if (connection_ != nullptr) return {};
    const auto now = Clock::now();
    if (now < next_connect_) return last_connect_error_;
    next_connect_ = now + std::chrono::seconds(1);
    try {
      auto connection = std::make_unique<rabbitmq::Connection>(
          endpoint_, "outbox-relay", options_.connect_timeout, options_.heartbeat);
      check_exchange(*connection);
      amqp_confirm_select(connection->get(), rabbitmq::Connection::kChannel);
      connection->check(amqp_get_rpc_reply(connection->get()), "confirm.select");
      connection_ = std::move(connection);
      next_tag_ = 1;
      if (connected_before_) counters_.rabbitmq_reconnects.fetch_add(1, std::memory_order_relaxed);
      connected_before_ = true;
      detail::log().info("rabbitmq sink: connected to {}, exchange {}",
                         rabbitmq::describe(endpoint_), options_.exchange);
      return {};
    } catch (const BrokerError& error) {
      last_connect_error_ = error.what();
      return last_connect_error_;
    }
  }

  void check_exchange(rabbitmq::Connection& connection) {
    amqp_exchange_declare(connection.get(), rabbitmq::Connection::kChannel,
                          rabbitmq::bytes(options_.exchange), rabbitmq::bytes("topic"),
                          /*passive=*/1, /*durable=*/1, 0, 0, amqp_empty_table);
    const amqp_rpc_reply_t reply = amqp_get_rpc_reply(connection.get());
    if (rabbitmq::reply_code(reply) == AMQP_NOT_FOUND) {
      connection.acknowledge_channel_close();
      if (!options_.declare_exchange) {
        throw ConfigError(fmt::format(
            "RabbitMQ exchange {} does not exist on {}: declare it (rabbitmqadmin declare "
            "exchange name={} type=topic durable=true) or pass --rabbitmq-declare-exchange",
            options_.exchange, rabbitmq::describe(endpoint_), options_.exchange));
      }
      amqp_exchange_declare(connection.get(), rabbitmq::Connection::kChannel,
                            rabbitmq::bytes(options_.exchange), rabbitmq::bytes("topic"), 0, 1, 0,
                            0, amqp_empty_table);
      connection.check(amqp_get_rpc_reply(connection.get()),
                       "cannot declare exchange " + options_.exchange, true);
      return;
    }
    connection.check(reply, "cannot check exchange " + options_.exchange);
  }

  // Reads one frame, waiting up to `wait`; false when none came (or the connection was lost).
  bool read_frame(std::chrono::milliseconds wait) {
    amqp_connection_state_t state = connection_->get();
    amqp_frame_t frame{};
    const timeval tv = to_timeval(wait);
    const int status = amqp_simple_wait_frame_noblock(state, &frame, &tv);
    if (status == AMQP_STATUS_TIMEOUT) return false;
    if (status != AMQP_STATUS_OK) {
      lose_connection("connection lost: " + rabbitmq::status_text(status));
      return false;
    }
    if (frame.frame_type == AMQP_FRAME_METHOD) handle_method(frame.payload.method);
    if (connection_ != nullptr) amqp_maybe_release_buffers(connection_->get());
    return true;
  }

  void handle_method(const amqp_method_t& method) {
    switch (method.id) {
      case AMQP_BASIC_ACK_METHOD: {
        const auto* ack = static_cast<const amqp_basic_ack_t*>(method.decoded);
        settle(ack->delivery_tag, ack->multiple != 0, true);
        break;
      }
      case AMQP_BASIC_NACK_METHOD: {
        const auto* nack = static_cast<const amqp_basic_nack_t*>(method.decoded);
        settle(nack->delivery_tag, nack->multiple != 0, false);
        break;
      }
      case AMQP_BASIC_RETURN_METHOD:
        take_return(*static_cast<const amqp_basic_return_t*>(method.decoded));
        break;
      case AMQP_CONNECTION_BLOCKED_METHOD:
        blocked_reason_ = rabbitmq::to_string(
            static_cast<const amqp_connection_blocked_t*>(method.decoded)->reason);
        counters_.rabbitmq_blocked.store(true);
        detail::log().warn("rabbitmq sink: the broker blocks publishers: {}",
                           detail::printable(blocked_reason_));
        break;
      case AMQP_CONNECTION_UNBLOCKED_METHOD:
        counters_.rabbitmq_blocked.store(false);
        detail::log().info("rabbitmq sink: the broker takes publishes again");
        break;
      case AMQP_CHANNEL_CLOSE_METHOD: {
        const auto* close = static_cast<const amqp_channel_close_t*>(method.decoded);
        // E.g. 404: the exchange was deleted. What was unconfirmed may or may not be in a queue.
        lose_connection(fmt::format("the broker closed the channel: {} {}", close->reply_code,
                                    detail::printable(rabbitmq::to_string(close->reply_text))));
        break;
      }
      case AMQP_CONNECTION_CLOSE_METHOD: {
        const auto* close = static_cast<const amqp_connection_close_t*>(method.decoded);
        connection_->acknowledge_connection_close();
        lose_connection(fmt::format("the broker closed the connection: {} {}", close->reply_code,
                                    detail::printable(rabbitmq::to_string(close->reply_text))));
        break;
      }
      default:
        break;
    }
  }

  // A returned message: its content header and body follow; the message_id says which send. Its
  // ack comes after, and settles it as a failure.
  void take_return(const amqp_basic_return_t& returned) {
    amqp_message_t message{};
    const amqp_rpc_reply_t reply =
        amqp_read_message(connection_->get(), rabbitmq::Connection::kChannel, &message, 0);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
      lose_connection("reading a returned message: " + rabbitmq::reply_text(reply));
      return;
    }
    if ((message.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
      returned_[rabbitmq::to_string(message.properties.message_id)] =
          fmt::format("{} {}", returned.reply_code,
                      detail::printable(rabbitmq::to_string(returned.reply_text)));
    }
    amqp_destroy_message(&message);
  }

  void settle(std::uint64_t tag, bool multiple, bool acked) {
    const auto end = pending_.upper_bound(tag);
    auto it = multiple ? pending_.begin() : pending_.find(tag);
    if (it == pending_.end()) return;  // given up already: that report stands
    const auto stop = multiple ? end : std::next(it);
    while (it != stop) {
      Pending& sent = it->second;
      DeliveryReport report{sent.ticket, DeliveryOutcome::published, {}, -1, -1, {}};
      if (const auto returned = returned_.find(sent.event_id); returned != returned_.end()) {
        counters_.rabbitmq_returns.fetch_add(1, std::memory_order_relaxed);
        report.outcome = DeliveryOutcome::retryable_failure;
        report.error = fmt::format(
            "RabbitMQ returned the message as unroutable ({}): no queue is bound to exchange {} "
            "for routing key {}",
            returned->second, options_.exchange, sent.routing_key);
        returned_.erase(returned);
      } else if (!acked) {
        counters_.rabbitmq_nacks.fetch_add(1, std::memory_order_relaxed);
        report.outcome = DeliveryOutcome::retryable_failure;
        report.error =
            "RabbitMQ refused the message (basic.nack): a queue is full with "
            "overflow=reject-publish, or the broker failed to store it";
      }
      ready_.push_back(std::move(report));
      it = pending_.erase(it);
    }
  }

  // Every unconfirmed send is an unknown outcome; the next send connects again.
  void lose_connection(const std::string& why) {
    detail::log().warn("rabbitmq sink: {}; {} unconfirmed send(s) will be sent again", why,
                       pending_.size());
    for (auto& [tag, sent] : pending_) {
      counters_.rabbitmq_confirm_timeouts.fetch_add(1, std::memory_order_relaxed);
      ready_.push_back(DeliveryReport{sent.ticket,
                                      DeliveryOutcome::unknown,
                                      "RabbitMQ: " + why + " before the confirm",
                                      -1,
                                      -1,
                                      {}});
    }
    pending_.clear();
    returned_.clear();
    connection_.reset();
    counters_.rabbitmq_blocked.store(false);
    last_connect_error_ = "RabbitMQ: " + why;
  }

  // Deadlines grow with the tag: the first pending send's is the earliest.
  std::chrono::milliseconds time_to_next_deadline(Clock::time_point now) const {
    if (pending_.empty()) return std::chrono::milliseconds::max();
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                        pending_.begin()->second.deadline - now),
                    std::chrono::milliseconds(0));
  }

  void expire_overdue(Clock::time_point now) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      counters_.rabbitmq_confirm_timeouts.fetch_add(1, std::memory_order_relaxed);
      ready_.push_back(DeliveryReport{
          it->second.ticket,
          DeliveryOutcome::unknown,
          fmt::format("no confirm from RabbitMQ within {} ms", options_.confirm_timeout.count()),
          -1,
          -1,
          {}});
      it = pending_.erase(it);
    }
  }

  void report(std::uint64_t ticket, DeliveryOutcome outcome, std::string error) {
    ready_.push_back(DeliveryReport{ticket, outcome, std::move(error), -1, -1, {}});
  }

  RabbitMqSinkOptions options_;
  rabbitmq::Endpoint endpoint_;
  std::unique_ptr<rabbitmq::Connection> connection_;
  bool connected_before_ = false;
  Clock::time_point next_connect_{};
  std::string last_connect_error_;
  std::string blocked_reason_;
  std::uint64_t next_tag_ = 1;
  std::map<std::uint64_t, Pending> pending_;               // by delivery tag
  std::unordered_map<std::string, std::string> returned_;  // event id -> the return's reply
  std::vector<DeliveryReport> ready_;
  struct Counters {
    OUTBOX_RABBITMQ_SINK_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

}  // namespace

std::unique_ptr<Sink> make_rabbitmq_sink(const RabbitMqSinkOptions& options) {
  return std::make_unique<RabbitMqSink>(options);
}

std::string render_rabbitmq_routing_key(const RabbitMqSinkOptions& options, const Event& event) {
  return detail::render_key(options.routing_key_template, event, options.partitions);
}

}  // namespace outbox
