// KafkaInboxConsumer's loop: poll a batch, apply it through the inbox in one transaction, store
// its offsets, the lag gauge, a new client when one is needed. Where partitions start and what an
// offset gap does: kafka_consumer_offsets.cpp.

#include <fmt/format.h>

#include <charconv>
#include <thread>

#include "common/backoff.hpp"
#include "common/fault.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "inbox/apply_batch.hpp"
#include "kafka/kafka_consumer_impl.hpp"

namespace outbox {
namespace {

constexpr std::size_t kMaxBatch = 500;

template <typename Int>
Int to_int(const std::string& text) {
  Int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

enum class Edge { first_message, after_last_message };

ConsumedEvent decode(const rd_kafka_message_t* message) {
  rd_kafka_headers_t* headers = nullptr;
  rd_kafka_message_headers(message, &headers);
  ConsumedEvent event;
  event.event_id =
      EventId::parse(kafka::header(headers, kafka::kHeaderEventId)).value_or(EventId{});
  event.topic = rd_kafka_topic_name(message->rkt);
  event.partition = message->partition;
  event.offset = message->offset;
  event.aggregate_type = kafka::header(headers, kafka::kHeaderAggregateType);
  if (message->key != nullptr) {
    event.aggregate_id.assign(static_cast<const char*>(message->key), message->key_len);
  }
  event.aggregate_sequence =
      to_int<std::int64_t>(kafka::header(headers, kafka::kHeaderAggregateSequence));
  event.event_type = kafka::header(headers, kafka::kHeaderEventType);
  event.traceparent = kafka::header(headers, "traceparent");
  event.schema_version = to_int<std::int32_t>(kafka::header(headers, kafka::kHeaderSchemaVersion));
  if (message->payload != nullptr) {
    event.payload.assign(static_cast<const char*>(message->payload), message->len);
  }
  return event;
}

// One entry per partition of the batch, at the offset of its first message in the batch or
// just after its last one.
kafka::PartitionListHandle partitions_of(const std::vector<kafka::MessageHandle>& batch,
                                         Edge edge) {
  kafka::PartitionListHandle list(rd_kafka_topic_partition_list_new(4));
  for (const auto& message : batch) {
    const char* topic = rd_kafka_topic_name(message->rkt);
    const std::int64_t offset = edge == Edge::first_message ? message->offset : message->offset + 1;
    rd_kafka_topic_partition_t* entry =
        rd_kafka_topic_partition_list_find(list.get(), topic, message->partition);
    if (entry == nullptr) {
      rd_kafka_topic_partition_list_add(list.get(), topic, message->partition)->offset = offset;
    } else {
      entry->offset = edge == Edge::first_message ? std::min(entry->offset, offset)
                                                  : std::max(entry->offset, offset);
    }
  }
  return list;
}

}  // namespace

KafkaInboxConsumer::Impl::Impl(KafkaConsumerOptions options, Effect effect)
    : options_(std::move(options)),
      effect_(std::move(effect)),
      inbox_(options_.schema,
             options_.consumer_name.empty() ? options_.group_id : options_.consumer_name,
             options_.ordering, options_.upcasters),
      connection_(pg::Connection::open(options_.database_url, "outbox-consumer")),
      health_("kafka consumer " + options_.group_id) {
  if (options_.group_id.empty()) throw ConfigError("Kafka consumer: group_id is empty");
  if (options_.topics.empty()) throw ConfigError("Kafka consumer: no topics to subscribe to");
  if (!effect_) throw InvalidArgument("Kafka consumer: the effect is empty");
  if (options_.retry_backoff_base.count() <= 0 ||
      options_.retry_backoff_max < options_.retry_backoff_base) {
    throw ConfigError(
        "Kafka consumer: retry_backoff_base must be positive and retry_backoff_max at least as "
        "large");
  }
  handle_ = connect_kafka();
}

// Polls until stopped; every failure is reported through health_ and retried with backoff.
void KafkaInboxConsumer::Impl::run() {
  detail::Backoff backoff(options_.retry_backoff_base, options_.retry_backoff_max);
  settle();
  while (!stopped()) {
    effect_threw_ = false;
    try {
      if (poll(std::chrono::milliseconds(100)) > 0) {
        backoff.reset();
        if (health_.health() != Health::broker_unavailable) settle();
      }
      continue;
    } catch (const DatabaseError& error) {
      // A lost inbox COMMIT answer (OutcomeUnknown) is retryable too: the batch comes again,
      // and whatever of it did commit is a duplicate the inbox drops.
      if (effect_threw_) {
        health_.set(Health::effect_failing, error.what());
      } else if (error.retryable()) {
        health_.set(Health::database_unavailable, error.what());
      } else {
        health_.set(Health::stopped, error.what());
        throw;
      }
    } catch (const BrokerError& error) {
      // The client is unusable (a rewind failed): a new one resumes at the committed offsets.
      health_.set(Health::broker_unavailable, error.what());
      try {
        replace_client();
      } catch (const Error& again) {
        health_.set(Health::broker_unavailable, again.what());
      }
    } catch (const std::exception& error) {
      health_.set(Health::effect_failing, error.what());
    }
    // In whole 20 ms slices, as before the shared Backoff: request_stop() is seen quickly, and
    // each wait rounds up to a slice (KafkaConsumerTest.RunRetriesAFailingEffectAndReportsIt
    // counts on waits not shorter than that: a batch that made progress resets the backoff).
    backoff.wait([this] { return stopped(); },
                 [](std::chrono::milliseconds) {
                   std::this_thread::sleep_for(std::chrono::milliseconds(20));
                 });
  }
  health_.set(Health::stopped);
}

kafka::KafkaHandle KafkaInboxConsumer::Impl::connect_kafka() {
  kafka::ConfHandle conf(rd_kafka_conf_new());
  kafka::set(conf.get(), "bootstrap.servers", options_.brokers);
  kafka::set(conf.get(), "group.id", options_.group_id);
  // No silent jumps: librdkafka reports a committed offset the broker no longer holds (and a
  // partition without one) instead of moving on; on_offset_reset() decides.
  kafka::set(conf.get(), "auto.offset.reset", "error");
  for (const auto& [key, value] : options_.properties) {
    if (key == "auto.offset.reset") {
      throw ConfigError(
          "Kafka property auto.offset.reset is refused: the consumer starts a new group at "
          "each partition's log start, and handles a committed offset that is no longer on the "
          "broker by on_offset_gap (stop or skip), never by a silent jump; remove the property");
    }
    if (key == "enable.auto.offset.store" && value != "false" && value != "0") {
      throw ConfigError("Kafka property " + key + "=" + value +
                        " is refused: an offset stored before the inbox transaction that "
                        "applied its message committed would skip the message after a failure");
    }
    kafka::set(conf.get(), key, value);
  }
  // Offsets are stored by us, after the inbox transaction committed; the background commit only
  // ever sends stored offsets.
  kafka::set(conf.get(), "enable.auto.offset.store", "false");
  kafka::set(conf.get(), "enable.auto.commit", "true");
  // Each assigned partition starts where the group committed, at its log start for a new group,
  // past an offset gap only when on_offset_gap=skip said so (assign()).
  rd_kafka_conf_set_opaque(conf.get(), this);
  rd_kafka_conf_set_rebalance_cb(conf.get(), &Impl::on_rebalance);
  kafka::KafkaHandle handle = kafka::create(RD_KAFKA_CONSUMER, std::move(conf));
  rd_kafka_poll_set_consumer(handle.get());
  kafka::PartitionListHandle topics(
      rd_kafka_topic_partition_list_new(static_cast<int>(options_.topics.size())));
  for (const std::string& topic : options_.topics) {
    rd_kafka_topic_partition_list_add(topics.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
  }
  if (const auto err = rd_kafka_subscribe(handle.get(), topics.get())) {
    throw BrokerError(fmt::format("subscribe failed: {}", rd_kafka_err2str(err)), err, false);
  }
  return handle;
}

// A new client in the group: it resumes at the committed offsets.
void KafkaInboxConsumer::Impl::replace_client() {
  // Until the new client stands, poll() refuses (it would poll a closed handle).
  broken_ = "the Kafka client is being replaced";
  close_kafka();
  handle_ = connect_kafka();
  broken_.clear();
  stopped_partitions_.clear();  // the new client starts them again; a gap stops them again
  counters_.partitions_stopped.store(0);
  ++counters_.reconnects;
}

void KafkaInboxConsumer::Impl::close_kafka() noexcept {
  if (!handle_) return;
  rd_kafka_commit(handle_.get(), nullptr, 0);  // stored offsets only: all committed effects
  rd_kafka_consumer_close(handle_.get());
  handle_.reset();
}

// Takes what is ready (up to kMaxBatch messages, waiting up to `max_wait` for the first) and
// applies it through the inbox in one transaction.
std::size_t KafkaInboxConsumer::Impl::poll(std::chrono::milliseconds max_wait) {
  if (!broken_.empty() || !handle_) {
    throw BrokerError("kafka consumer: " + broken_ + "; destroy it and create a new one", 0, false);
  }
  if (!connection_.healthy()) {
    // Before taking messages: a batch taken now could not be applied.
    connection_ = pg::Connection::open(options_.database_url, "outbox-consumer");
    ++counters_.reconnects;
    detail::log().info("kafka consumer {}: reconnected to PostgreSQL", options_.group_id);
    settle();
  }
  inbox_.tend(connection_.get(), effect_, counters_, effect_threw_);
  std::vector<kafka::MessageHandle> batch;
  int wait = static_cast<int>(max_wait.count());
  while (batch.size() < kMaxBatch) {
    kafka::MessageHandle message(rd_kafka_consumer_poll(handle_.get(), wait));
    if (!message) break;
    wait = 0;
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (message->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && message->rkt != nullptr) {
        on_offset_reset(*message);
      } else if (message->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        health_.set(Health::broker_unavailable, rd_kafka_message_errstr(message.get()));
      } else if (message->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        detail::log().warn("kafka consumer: {}",
                           detail::printable(rd_kafka_message_errstr(message.get())));
      }
      continue;
    }
    if (health_.health() == Health::broker_unavailable) settle();
    batch.push_back(std::move(message));
  }
  measure_lag();  // before handle(): a batch that keeps failing must not freeze the gauge
  if (!batch.empty()) handle(batch);
  if (restart_) {
    // librdkafka does not fetch a partition again after its offset error; a new client's
    // assignment starts it where assign() says.
    restart_ = false;
    replace_client();
  }
  return batch.size();
}

KafkaConsumerStats KafkaInboxConsumer::Impl::stats() const {
  KafkaConsumerStats s;
  OUTBOX_STAT_COPY(OUTBOX_KAFKA_CONSUMER_STATS, counters_, s);
  std::tie(s.health, s.last_error) = health_.snapshot();
  return s;
}

void KafkaInboxConsumer::Impl::handle(const std::vector<kafka::MessageHandle>& batch) {
  counters_.received += batch.size();
  std::vector<ConsumedEvent> events;
  events.reserve(batch.size());
  for (const auto& message : batch) {
    ConsumedEvent event = decode(message.get());
    if (event.event_id.is_nil()) {
      // Without an id there is nothing to deduplicate on; it is not an outbox message.
      ++counters_.rejected;
      detail::log().error("kafka consumer: {}[{}]@{} has no valid event_id header; skipped",
                          detail::printable(event.topic), event.partition, event.offset);
      continue;
    }
    events.push_back(std::move(event));
  }
  try {
    const auto counts = inbox_.apply(connection_.get(), events, effect_, effect_threw_);
    detail::count_batch(counters_, counts);
  } catch (...) {
    ++counters_.failed_batches;
    if (effect_threw_) ++counters_.effect_failures;
    rewind(batch);
    throw;
  }
  OUTBOX_FAULT(fault::kConsumerAfterCommitBeforeOffset);
  store_offsets(batch);
}

// The lag gauge, at most once a second: positions and the watermarks the client cached from
// its fetches (no request to the broker).
void KafkaInboxConsumer::Impl::measure_lag() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_lag_) return;
  next_lag_ = now + std::chrono::seconds(1);
  rd_kafka_topic_partition_list_t* raw = nullptr;
  if (rd_kafka_assignment(handle_.get(), &raw) != RD_KAFKA_RESP_ERR_NO_ERROR || raw == nullptr) {
    counters_.lag_messages.store(-1);
    return;
  }
  const kafka::PartitionListHandle assigned(raw);
  rd_kafka_position(handle_.get(), assigned.get());
  std::int64_t lag = 0;
  bool known = false;
  for (int i = 0; i < assigned->cnt; ++i) {
    const rd_kafka_topic_partition_t& entry = assigned->elems[i];
    std::int64_t low = 0, high = 0;
    if (entry.offset < 0 ||
        rd_kafka_get_watermark_offsets(handle_.get(), entry.topic, entry.partition, &low, &high) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        high < 0) {
      continue;
    }
    lag += std::max<std::int64_t>(0, high - entry.offset);
    known = true;
  }
  counters_.lag_messages.store(known ? lag : -1);
}

// Running, unless an offset gap stopped a partition: that stays visible until a new client or
// a rebalance takes the partition away.
void KafkaInboxConsumer::Impl::settle() {
  if (stopped_partitions_.empty()) {
    health_.set(Health::running);
  } else {
    health_.set(Health::partition_stopped, stopped_partitions_.begin()->second);
  }
}

// Seeks every partition of the batch back to its first message in the batch, so nothing of an
// uncommitted batch is skipped, whether the caller keeps polling or restarts.
void KafkaInboxConsumer::Impl::rewind(const std::vector<kafka::MessageHandle>& batch) {
  const auto positions = partitions_of(batch, Edge::first_message);
  std::string problem;
  if (rd_kafka_error_t* error = rd_kafka_seek_partitions(handle_.get(), positions.get(), 5000)) {
    problem = rd_kafka_error_string(error);
    rd_kafka_error_destroy(error);
  }
  for (int i = 0; problem.empty() && i < positions->cnt; ++i) {
    if (positions->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      problem = rd_kafka_err2str(positions->elems[i].err);
    }
  }
  if (!problem.empty()) {
    // Polling on could now store offsets past the failed batch: refuse to.
    broken_ = "rewind after a failed effect did not work: " + problem;
    detail::log().error("kafka consumer: {}", detail::printable(broken_));
  }
}

// After the inbox commit: the next offset of every partition in the batch becomes committable.
void KafkaInboxConsumer::Impl::store_offsets(const std::vector<kafka::MessageHandle>& batch) {
  const auto offsets = partitions_of(batch, Edge::after_last_message);
  if (const auto err = rd_kafka_offsets_store(handle_.get(), offsets.get())) {
    // Happens after a rebalance took a partition away: the new owner re-delivers, the inbox
    // turns that into a no-op.
    detail::log().warn("kafka consumer: offset store failed: {}", rd_kafka_err2str(err));
  }
}

KafkaInboxConsumer::KafkaInboxConsumer(KafkaConsumerOptions options, Effect effect)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(effect))) {}
KafkaInboxConsumer::~KafkaInboxConsumer() = default;

std::size_t KafkaInboxConsumer::poll(std::chrono::milliseconds max_wait) {
  return impl_->poll(max_wait);
}

void KafkaInboxConsumer::run() { impl_->run(); }

void KafkaInboxConsumer::request_stop() noexcept { impl_->request_stop(); }
KafkaConsumerStats KafkaInboxConsumer::stats() const { return impl_->stats(); }

std::vector<StatSample> stat_samples(const KafkaConsumerStats& stats) {
  return OUTBOX_STAT_SAMPLES(OUTBOX_KAFKA_CONSUMER_STATS, stats, detail::kPlain);
}

}  // namespace outbox
