// NatsInboxConsumer: fetch a batch from a durable pull consumer, apply it through the inbox in one
// transaction, then acknowledge it; a failed batch is negatively acknowledged whole, in order.

#include "outbox/nats_consumer.hpp"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <optional>
#include <thread>

#include "common/fault.hpp"
#include "common/health_board.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "inbox/apply_batch.hpp"
#include "nats/nats_common.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

using ConsumerInfoHandle = detail::Holder<jsConsumerInfo, &jsConsumerInfo_Destroy>;
using MetaDataHandle = detail::Holder<jsMsgMetaData, &jsMsgMetaData_Destroy>;

struct MessageList {
  natsMsgList list{nullptr, 0};
  ~MessageList() { natsMsgList_Destroy(&list); }
};

std::string header(natsMsg* message, const char* name) {
  const char* value = nullptr;
  return natsMsgHeader_Get(message, name, &value) == NATS_OK && value != nullptr ? value : "";
}

template <typename Int>
Int to_int(const std::string& text) {
  Int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::int64_t nanoseconds(std::chrono::milliseconds duration) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count();
}

void check_options(const NatsConsumerOptions& options) {
  if (options.durable.empty() || options.durable.find_first_of(". *>\t") != std::string::npos) {
    throw ConfigError(
        "NATS consumer: the durable name must be set, without dots, spaces or "
        "wildcards, not \"" +
        detail::printable(options.durable, 100) + "\"");
  }
  if (options.batch < 1 || options.batch > 10000) {
    throw ConfigError(
        fmt::format("NATS consumer: batch must be 1 to 10000, not {}", options.batch));
  }
  if (options.filter_subject.empty()) {
    throw ConfigError("NATS consumer: the filter subject is empty (e.g. outbox.*.*)");
  }
  if (options.retry_backoff_base.count() <= 0 ||
      options.retry_backoff_max < options.retry_backoff_base ||
      options.ack_wait < std::chrono::seconds(1)) {
    throw ConfigError(
        "NATS consumer: retry_backoff_base must be positive, retry_backoff_max at least as large, "
        "and ack_wait at least 1 s");
  }
}

}  // namespace

class NatsInboxConsumer::Impl {
 public:
  Impl(NatsConsumerOptions options, Effect effect)
      : options_(std::move(options)),
        effect_(std::move(effect)),
        inbox_(options_.schema,
               options_.consumer_name.empty() ? options_.durable : options_.consumer_name,
               options_.ordering, options_.upcasters),
        health_("nats consumer " + options_.durable),
        database_(pg::Connection::open(options_.database_url, "outbox-consumer")) {
    check_options(options_);
    if (!effect_) throw InvalidArgument("NATS consumer: the effect is empty");
    settings_ = nats::make_options(nats::ConnectSettings{
        options_.servers, "outbox-consumer-" + options_.durable, std::chrono::milliseconds(2000),
        options_.credentials_file, options_.ca_file});
    natsOptions_SetDisconnectedCB(settings_.get(), &Impl::on_disconnected, this);
    natsOptions_SetClosedCB(settings_.get(), &nats::ClosedSignal::on_closed, &closed_);
    connection_ = nats::connect(settings_.get(), false);
    jsCtx* js = nullptr;
    if (natsConnection_JetStream(&js, connection_.get(), nullptr) != NATS_OK) {
      throw BrokerError("NATS consumer: cannot open a JetStream context", 0, false);
    }
    js_.reset(js);
  }

  // The connection's callbacks (on_disconnected) must not outlive this object.
  ~Impl() {
    subscription_.reset();
    nats::close_and_wait(connection_.get(), closed_);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::size_t poll(std::chrono::milliseconds max_wait) {
    if (!database_.healthy()) {
      database_ = pg::Connection::open(options_.database_url, "outbox-consumer");
      ++counters_.reconnects;
    }
    inbox_.tend(database_.get(), effect_, counters_, effect_threw_);
    if (natsConnection_IsClosed(connection_.get())) {
      // nats.c gives a connection up for good only after repeated authorization errors or a
      // server's -ERR; no retry of ours would reopen it.
      throw ConfigError(
          "NATS consumer: the connection was closed for good (repeated "
          "authorization errors, or an error from the server): check the "
          "credentials and the server's log");
    }
    if (!subscription_) subscribe();
    if (const std::uint64_t wanted = checks_wanted_.load();
        checked_ != wanted && !outstanding_settled(max_wait, wanted)) {
      return 0;
    }
    MessageList fetched;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        natsSubscription_Fetch(&fetched.list, subscription_.get(), options_.batch,
                               std::max<std::int64_t>(max_wait.count(), 1), &code);
    if (status == NATS_TIMEOUT) return 0;
    if (status != NATS_OK) {
      throw BrokerError("NATS consumer: fetch failed: " + nats::error_text(status), 0, true);
    }
    if (health_.health() == Health::broker_unavailable) health_.set(Health::running);
    handle(fetched.list);
    return static_cast<std::size_t>(fetched.list.Count);
  }

  void run() {
    detail::run_until_stopped(health_, options_.retry_backoff_base, options_.retry_backoff_max,
                              stop_, effect_threw_, [this] {
                                effect_threw_ = false;
                                poll(std::chrono::milliseconds(200));
                              });
  }

  void request_stop() noexcept { stop_.store(true); }

  NatsConsumerStats stats() const {
    NatsConsumerStats s;
    OUTBOX_STAT_COPY(OUTBOX_NATS_CONSUMER_STATS, counters_, s);
    std::tie(s.health, s.last_error) = health_.snapshot();
    return s;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Messages the server counts as delivered and not acknowledged while this consumer holds none
  // (a fetch's answer lost with a server that died, a consumer process killed mid-batch, acks
  // lost in a disconnect) come again only after ack_wait, behind anything fetched meanwhile: an
  // aggregate's k+1 would be applied before its k. So after a (re)connect, and after an ack the
  // server did not confirm, nothing new is fetched while any are outstanding, until ack_wait has
  // passed since they were first seen: they are then due, and JetStream serves redeliveries
  // before new messages. Returns true when fetching may go on.
  bool outstanding_settled(std::chrono::milliseconds max_wait, std::uint64_t wanted) {
    jsConsumerInfo* raw = nullptr;
    if (const natsStatus status = js_GetConsumerInfo(&raw, js_.get(), options_.stream.c_str(),
                                                     options_.durable.c_str(), nullptr, nullptr);
        status != NATS_OK) {
      throw BrokerError(
          "NATS consumer: cannot read the consumer's state: " + nats::error_text(status), 0, true);
    }
    const ConsumerInfoHandle info(raw);
    const auto now = Clock::now();
    if (info->NumAckPending > 0 && !outstanding_since_) {
      outstanding_since_ = now;
      ++counters_.redelivery_waits;
      detail::log().info(
          "nats consumer {}: {} message(s) delivered and not acknowledged; fetching nothing new "
          "until they come again (ack_wait {} ms), so no aggregate is applied out of order",
          options_.durable, info->NumAckPending, options_.ack_wait.count());
    }
    const auto due =
        outstanding_since_.value_or(now) + options_.ack_wait + std::chrono::milliseconds(100);
    if (info->NumAckPending == 0 || now >= due) {
      checked_ = wanted;  // a disconnect meanwhile asked for another check: it comes next poll
      outstanding_since_.reset();
      return true;
    }
    std::this_thread::sleep_for(
        std::min(max_wait, std::chrono::duration_cast<std::chrono::milliseconds>(due - now)));
    return false;
  }

  static void on_disconnected(natsConnection* /*connection*/, void* closure) {
    ++static_cast<Impl*>(closure)->checks_wanted_;
  }

  // Binds to the durable consumer, creating it when it does not exist, and refuses one whose
  // settings would break order or acknowledgements.
  void subscribe() {
    jsSubOptions sub_options;
    jsSubOptions_Init(&sub_options);
    sub_options.Stream = options_.stream.c_str();
    sub_options.Config.Durable = options_.durable.c_str();
    sub_options.Config.AckPolicy = js_AckExplicit;
    sub_options.Config.AckWait = nanoseconds(options_.ack_wait);
    sub_options.Config.MaxAckPending = options_.batch;
    sub_options.Config.MaxDeliver = -1;
    sub_options.Config.DeliverPolicy = js_DeliverAll;
    natsSubscription* raw = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_PullSubscribe(&raw, js_.get(), options_.filter_subject.c_str(), options_.durable.c_str(),
                         nullptr, &sub_options, &code);
    nats::SubscriptionHandle subscription(raw);
    if (status != NATS_OK && nats::is_transient(status) && code == 0) {
      throw BrokerError("NATS consumer: cannot subscribe: " + nats::error_text(status), 0, true);
    }
    if (code == JSStreamNotFoundErr) {
      // Consumers often start before the relay that creates the stream: wait for it.
      throw BrokerError("NATS consumer: stream " + options_.stream + " does not exist (yet)", 0,
                        true);
    }
    if (status != NATS_OK) {
      // The server or the client refused the consumer as asked: a missing stream, a filter
      // outside the stream, an existing consumer with other settings.
      throw ConfigError(fmt::format(
          "NATS consumer {} on stream {} ({}): {}{}. An existing consumer with other settings "
          "(outbox needs explicit acks and max_ack_pending = the batch) must be removed first: "
          "nats consumer rm {} {}",
          options_.durable, options_.stream, options_.filter_subject, nats::error_text(status),
          code != 0 ? fmt::format(" (JetStream error {})", static_cast<int>(code)) : "",
          options_.stream, options_.durable));
    }
    jsConsumerInfo* info_raw = nullptr;
    if (js_GetConsumerInfo(&info_raw, js_.get(), options_.stream.c_str(), options_.durable.c_str(),
                           nullptr, nullptr) == NATS_OK) {
      const ConsumerInfoHandle info(info_raw);
      const jsConsumerConfig& config = *info->Config;
      // A limit on deliveries drops an event that failed often enough (its successor then
      // goes first); a backoff list redelivers later than ack_wait, past the outstanding wait.
      if (config.AckPolicy != js_AckExplicit || config.MaxAckPending > options_.batch ||
          config.MaxAckPending <= 0 || config.MaxDeliver > 0 || config.BackOffLen > 0) {
        throw ConfigError(fmt::format(
            "NATS consumer {} exists with ack policy {}, max_ack_pending {}, max_deliver {} and "
            "{} backoff step(s): outbox needs explicit acks, max_ack_pending at most the batch "
            "({}), no delivery limit and no backoff list, or an aggregate's events could be "
            "applied out of order or dropped; delete it (nats consumer rm {} {}) or fix it",
            options_.durable, static_cast<int>(config.AckPolicy), config.MaxAckPending,
            config.MaxDeliver, config.BackOffLen, options_.batch, options_.stream,
            options_.durable));
      }
    }
    subscription_ = std::move(subscription);
    detail::log().info("nats consumer {}: reading stream {} ({})", options_.durable,
                       options_.stream, options_.filter_subject);
  }

  ConsumedEvent decode(natsMsg* message) {
    ConsumedEvent event;
    event.event_id = EventId::parse(header(message, "event_id")).value_or(EventId{});
    event.aggregate_type = header(message, "aggregate_type");
    event.aggregate_id = header(message, "aggregate_id");
    event.aggregate_sequence = to_int<std::int64_t>(header(message, "aggregate_sequence"));
    event.event_type = header(message, "event_type");
    event.schema_version = to_int<std::int32_t>(header(message, "schema_version"));
    event.traceparent = header(message, "traceparent");
    event.topic = natsMsg_GetSubject(message) != nullptr ? natsMsg_GetSubject(message) : "";
    event.partition = -1;
    if (natsMsg_GetDataLength(message) > 0) {
      event.payload.assign(natsMsg_GetData(message),
                           static_cast<std::size_t>(natsMsg_GetDataLength(message)));
    }
    jsMsgMetaData* meta_raw = nullptr;
    if (natsMsg_GetMetaData(&meta_raw, message) == NATS_OK) {
      const MetaDataHandle meta(meta_raw);
      event.offset = static_cast<std::int64_t>(meta->Sequence.Stream);
      if (meta->NumDelivered > 1) ++counters_.redeliveries;
      counters_.pending_messages.store(static_cast<std::int64_t>(meta->NumPending));
    }
    return event;
  }

  void handle(const natsMsgList& list) {
    counters_.received += static_cast<std::uint64_t>(list.Count);
    std::vector<ConsumedEvent> events;
    for (int i = 0; i < list.Count; ++i) {
      ConsumedEvent event = decode(list.Msgs[i]);
      if (event.event_id.is_nil()) {
        ++counters_.rejected;
        detail::log().error("nats consumer: {} seq {} has no valid event_id header; skipped",
                            detail::printable(event.topic), event.offset);
        continue;
      }
      events.push_back(std::move(event));
    }
    try {
      const auto counts = inbox_.apply(database_.get(), events, effect_, effect_threw_);
      detail::count_batch(counters_, counts);
    } catch (...) {
      ++counters_.failed_batches;
      if (effect_threw_) ++counters_.effect_failures;
      // Back whole and in order, before anything after it (max_ack_pending = the batch).
      for (int i = 0; i < list.Count; ++i) natsMsg_Nak(list.Msgs[i], nullptr);
      throw;
    }
    OUTBOX_FAULT(fault::kConsumerAfterCommitBeforeOffset);
    // The last ack waits for the server's answer: the earlier ones, sent before it on the same
    // connection, are then in too. Without that answer, what is outstanding is checked first.
    for (int i = 0; i + 1 < list.Count; ++i) natsMsg_Ack(list.Msgs[i], nullptr);
    if (list.Count > 0 && natsMsg_AckSync(list.Msgs[list.Count - 1], nullptr, nullptr) != NATS_OK) {
      ++checks_wanted_;
    }
  }

  NatsConsumerOptions options_;
  Effect effect_;
  detail::InboxApplier inbox_;
  detail::HealthBoard health_;
  nats::ClosedSignal closed_;  // before the connection: it outlives the connection's callbacks
  nats::OptionsHandle settings_;
  nats::ConnectionHandle connection_;
  nats::ContextHandle js_;
  nats::SubscriptionHandle subscription_;
  pg::Connection database_;
  std::atomic<bool> stop_{false};
  bool effect_threw_ = false;
  // Outstanding messages are checked before the next fetch while checked_ != checks_wanted_: at
  // the start, after each disconnect (nats.c's thread) and each unconfirmed ack.
  std::atomic<std::uint64_t> checks_wanted_{1};
  std::uint64_t checked_ = 0;
  std::optional<Clock::time_point> outstanding_since_;
  struct Counters {
    OUTBOX_NATS_CONSUMER_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

NatsInboxConsumer::NatsInboxConsumer(NatsConsumerOptions options, Effect effect)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(effect))) {}
NatsInboxConsumer::~NatsInboxConsumer() = default;
std::size_t NatsInboxConsumer::poll(std::chrono::milliseconds max_wait) {
  return impl_->poll(max_wait);
}
void NatsInboxConsumer::run() { impl_->run(); }
void NatsInboxConsumer::request_stop() noexcept { impl_->request_stop(); }
NatsConsumerStats NatsInboxConsumer::stats() const { return impl_->stats(); }

std::vector<StatSample> stat_samples(const NatsConsumerStats& stats) {
  return OUTBOX_STAT_SAMPLES(OUTBOX_NATS_CONSUMER_STATS, stats, detail::kPlain);
}

}  // namespace outbox
