#include "outbox/kafka_consumer.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "common/backoff.hpp"
#include "common/fault.hpp"
#include "common/health_board.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "kafka/kafka_common.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

constexpr std::size_t kMaxBatch = 500;

template <typename Int>
Int to_int(const std::string& text) {
  Int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

}  // namespace

class KafkaInboxConsumer::Impl {
 public:
  Impl(KafkaConsumerOptions options, Effect effect)
      : options_(std::move(options)),
        effect_(std::move(effect)),
        inbox_(options_.schema,
               options_.consumer_name.empty() ? options_.group_id : options_.consumer_name),
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

  ~Impl() { close_kafka(); }

  // Polls until stopped; every failure is reported through health_ and retried with backoff.
  void run() {
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

 private:
  kafka::KafkaHandle connect_kafka() {
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
  void replace_client() {
    // Until the new client stands, poll() refuses (it would poll a closed handle).
    broken_ = "the Kafka client is being replaced";
    close_kafka();
    handle_ = connect_kafka();
    broken_.clear();
    stopped_partitions_.clear();  // the new client starts them again; a gap stops them again
    counters_.partitions_stopped.store(0);
    ++counters_.reconnects;
  }

  void close_kafka() noexcept {
    if (!handle_) return;
    rd_kafka_commit(handle_.get(), nullptr, 0);  // stored offsets only: all committed effects
    rd_kafka_consumer_close(handle_.get());
    handle_.reset();
  }

 public:
  // Takes what is ready (up to kMaxBatch messages, waiting up to `max_wait` for the first) and
  // applies it through the inbox in one transaction.
  std::size_t poll(std::chrono::milliseconds max_wait) {
    if (!broken_.empty() || !handle_) {
      throw BrokerError("kafka consumer: " + broken_ + "; destroy it and create a new one", 0,
                        false);
    }
    if (!connection_.healthy()) {
      // Before taking messages: a batch taken now could not be applied.
      connection_ = pg::Connection::open(options_.database_url, "outbox-consumer");
      ++counters_.reconnects;
      detail::log().info("kafka consumer {}: reconnected to PostgreSQL", options_.group_id);
      settle();
    }
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

  void request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  bool stopped() const noexcept { return stop_.load(std::memory_order_relaxed); }

  KafkaConsumerStats stats() const {
    KafkaConsumerStats s;
    OUTBOX_STAT_COPY(OUTBOX_KAFKA_CONSUMER_STATS, counters_, s);
    std::tie(s.health, s.last_error) = health_.snapshot();
    return s;
  }

 private:
  static ConsumedEvent decode(const rd_kafka_message_t* message) {
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
    event.schema_version =
        to_int<std::int32_t>(kafka::header(headers, kafka::kHeaderSchemaVersion));
    if (message->payload != nullptr) {
      event.payload.assign(static_cast<const char*>(message->payload), message->len);
    }
    return event;
  }

  void handle(const std::vector<kafka::MessageHandle>& batch) {
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
    std::vector<EventId> ids;
    ids.reserve(events.size());
    for (const auto& event : events) ids.push_back(event.event_id);
    effect_threw_ = false;
    try {
      const auto results =
          inbox_.process_batch(connection_.get(), ids, [&](PGconn* conn, std::size_t i) {
            try {
              effect_(conn, events[i]);
            } catch (const DatabaseError& error) {
              // A lost connection or a deadlock is the database's trouble, anything else the
              // effect's own; run() retries both.
              effect_threw_ = !error.retryable() && PQstatus(conn) == CONNECTION_OK;
              throw;
            } catch (...) {
              effect_threw_ = PQstatus(conn) == CONNECTION_OK;
              throw;
            }
          });
      for (const InboxResult result : results) {
        if (result == InboxResult::applied) {
          ++counters_.applied;
        } else {
          ++counters_.duplicates;
        }
      }
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
  void measure_lag() {
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
          rd_kafka_get_watermark_offsets(handle_.get(), entry.topic, entry.partition, &low,
                                         &high) != RD_KAFKA_RESP_ERR_NO_ERROR ||
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
  void settle() {
    if (stopped_partitions_.empty()) {
      health_.set(Health::running);
    } else {
      health_.set(Health::partition_stopped, stopped_partitions_.begin()->second);
    }
  }

  // librdkafka could not fetch a partition from the offset it had (auto.offset.reset=error) and
  // stopped fetching it: either choose_start_offsets() gave it no offset (offset < 0: stopped at
  // a gap there, or the lookup failed) or the broker no longer holds that offset.
  void on_offset_reset(const rd_kafka_message_t& error) {
    const std::string topic = rd_kafka_topic_name(error.rkt);
    const std::int32_t partition = error.partition;
    const std::string where = fmt::format("{}[{}]", detail::printable(topic), partition);
    if (error.offset < 0) {
      // No offset to start from: assign() stopped it at an offset gap (nothing more to do), or
      // could not look it up. run() replaces the client after its backoff and looks again.
      if (stopped_partitions_.count({topic, partition}) == 0) {
        broken_ = fmt::format("{}: no offset to start from ({})", where,
                              detail::printable(rd_kafka_message_errstr(&error)));
      }
      return;
    }
    std::int64_t low = -1;
    std::int64_t high = -1;
    const auto err = rd_kafka_query_watermark_offsets(handle_.get(), topic.c_str(), partition, &low,
                                                      &high, 5000);
    std::string gap;
    std::int64_t missing = 0;
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      gap = fmt::format(
          "{}: offset {} is not on the broker ({}), and the partition's bounds could not be read "
          "({}): messages the consumer had not applied may be gone",
          where, error.offset, detail::printable(rd_kafka_message_errstr(&error)),
          rd_kafka_err2str(err));
    } else if (error.offset < low) {
      missing = low - error.offset;
      gap = fmt::format(
          "{}: the next message to apply, offset {}, is gone from the broker; the partition now "
          "starts at offset {}: {} messages (offsets {} to {}) were never applied, the consumer "
          "fell behind the topic's retention",
          where, error.offset, low, missing, error.offset, low - 1);
    } else if (error.offset > high) {
      gap = fmt::format(
          "{}: the next message to apply, offset {}, is past the partition's end {} (was the "
          "topic deleted and created again?): messages the consumer had not applied may be gone",
          where, error.offset, high);
    } else {
      // In range again (the broker's answer was about an older state): fetch from there.
      // run() replaces the client after its backoff: a condition that persists cannot spin.
      broken_ = fmt::format("{}: offset {} was out of range and is not now ({} to {})", where,
                            error.offset, low, high);
      return;
    }
    if (meet_gap(topic, partition, error.offset, missing, gap)) {
      skip_from_[{topic, partition}] = {
          error.offset, low >= 0 && error.offset < low ? low : RD_KAFKA_OFFSET_BEGINNING};
      restart_ = true;  // once per gap
    }
  }

  // Counts the gap once, logs it, and with on_offset_gap=stop records the partition as stopped;
  // returns true when the policy is skip (the caller moves the partition past the gap).
  bool meet_gap(const std::string& topic, std::int32_t partition, std::int64_t from,
                std::int64_t missing, const std::string& gap) {
    if (counted_gaps_.insert({topic, partition, from}).second) {
      ++counters_.offset_gaps;
      counters_.offset_gap_messages += static_cast<std::uint64_t>(missing);
    }
    if (options_.on_offset_gap == OffsetGapPolicy::skip) {
      detail::log().error("kafka consumer {}: {}; on_offset_gap=skip: going on from the log start",
                          options_.group_id, gap);
      health_.set(health_.health(), gap);  // last_error says what was skipped
      return true;
    }
    detail::log().error(
        "kafka consumer {}: {}; the partition stops (on_offset_gap=stop): restart the consumer "
        "once with on_offset_gap=skip and replay the missing events with `outbox replay` "
        "(docs/OPERATIONS.md, OutboxConsumerOffsetGap)",
        options_.group_id, gap);
    stopped_partitions_[{topic, partition}] = gap;
    counters_.partitions_stopped.store(stopped_partitions_.size());
    settle();
    return false;
  }

  // Both protocols: eager (the default, the whole assignment at once) and cooperative (a user's
  // partition.assignment.strategy=cooperative-sticky: only what changes).
  static void on_rebalance(rd_kafka_t* handle, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t* partitions, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(handle), "COOPERATIVE") == 0;
    const bool gained = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
    if (gained) {
      self->choose_start_offsets(handle, partitions);
    } else {
      // Stored offsets of what goes are committed as it goes (auto commit). A stopped partition
      // that goes is no longer this process's to report: its next owner meets the gap itself.
      self->forget_stopped(partitions);
    }
    std::string problem;
    if (cooperative) {
      rd_kafka_error_t* error = gained ? rd_kafka_incremental_assign(handle, partitions)
                                       : rd_kafka_incremental_unassign(handle, partitions);
      if (error != nullptr) {
        problem = rd_kafka_error_string(error);
        rd_kafka_error_destroy(error);
      }
    } else if (const auto failed = rd_kafka_assign(handle, gained ? partitions : nullptr)) {
      problem = rd_kafka_err2str(failed);
    }
    if (!problem.empty()) {
      self->broken_ =
          std::string(gained ? "assigning" : "giving up") + " partitions failed: " + problem;
    }
  }

  void forget_stopped(const rd_kafka_topic_partition_list_t* partitions) {
    for (int i = 0; i < partitions->cnt; ++i) {
      stopped_partitions_.erase({partitions->elems[i].topic, partitions->elems[i].partition});
    }
    counters_.partitions_stopped.store(stopped_partitions_.size());
    if (stopped_partitions_.empty() && health_.health() == Health::partition_stopped) {
      health_.set(Health::running);
    }
  }

  // Called from rd_kafka_consumer_poll() on the polling thread. Each partition starts at the
  // group's committed offset; without one (a new group) at its log start; where this consumer
  // met an offset gap with on_offset_gap=skip and the group is still at the gap, past it. When
  // the lookup fails, the partitions start without an offset: librdkafka's error comes back to
  // on_offset_reset(), and run() starts a new client after its backoff.
  void choose_start_offsets(rd_kafka_t* handle, rd_kafka_topic_partition_list_t* partitions) {
    applied_before_.reset();  // asked at most once per assignment
    if (const auto err = rd_kafka_committed(handle, partitions, 10000)) {
      detail::log().warn("kafka consumer {}: committed offsets could not be read: {}",
                         options_.group_id, rd_kafka_err2str(err));
      for (int i = 0; i < partitions->cnt; ++i)
        partitions->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
    } else {
      for (int i = 0; i < partitions->cnt; ++i) {
        rd_kafka_topic_partition_t& entry = partitions->elems[i];
        if (entry.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
          entry.offset = RD_KAFKA_OFFSET_INVALID;
          continue;
        }
        if (entry.offset < 0) {
          entry.offset = start_without_committed_offset(handle, entry.topic, entry.partition);
          continue;
        }
        const auto skip = skip_from_.find({entry.topic, entry.partition});
        if (skip != skip_from_.end()) {
          if (entry.offset == skip->second.first) entry.offset = skip->second.second;
          skip_from_.erase(skip);  // once: the group's next commit is past the gap
        }
      }
    }
  }

  // Where a partition the group has no committed offset for starts. A new group starts at the
  // log start. But Kafka also forgets a group's offsets after offsets.retention.minutes with no
  // member (7 days by default, the same as the default retention.ms): when the partition no
  // longer starts at offset 0 and this consumer's inbox has applied events before, messages it
  // never applied may have gone meanwhile, and that is an offset gap of unknown size. Called in
  // the rebalance callback: nothing may throw out of it; whatever cannot be looked up gives no
  // offset (RD_KAFKA_OFFSET_INVALID: librdkafka stops the partition, on_offset_reset() has the
  // client replaced after the backoff, and it is looked at again).
  std::int64_t start_without_committed_offset(rd_kafka_t* handle, const char* topic,
                                              std::int32_t partition) noexcept {
    try {
      std::int64_t low = -1;
      std::int64_t high = -1;
      if (rd_kafka_query_watermark_offsets(handle, topic, partition, &low, &high, 5000) !=
          RD_KAFKA_RESP_ERR_NO_ERROR) {
        return RD_KAFKA_OFFSET_INVALID;
      }
      if (low <= 0 || !inbox_has_applied()) return RD_KAFKA_OFFSET_BEGINNING;
      const std::string gap = fmt::format(
          "{}[{}]: the group has no committed offset (Kafka forgets a group's offsets after "
          "offsets.retention.minutes without members) and the partition now starts at offset {}, "
          "but consumer {} has applied events before: messages it never applied may be gone",
          detail::printable(topic), partition, low, detail::printable(inbox_name()));
      return meet_gap(topic, partition, -1, 0, gap) ? RD_KAFKA_OFFSET_BEGINNING
                                                    : RD_KAFKA_OFFSET_INVALID;
    } catch (const std::exception& error) {
      detail::log().warn("kafka consumer {}: {}[{}]: could not decide where to start: {}",
                         options_.group_id, detail::printable(topic), partition,
                         detail::printable(error.what()));
      return RD_KAFKA_OFFSET_INVALID;
    }
  }

  const std::string& inbox_name() const {
    return options_.consumer_name.empty() ? options_.group_id : options_.consumer_name;
  }

  bool inbox_has_applied() {
    if (applied_before_) return *applied_before_;
    if (!connection_.healthy()) throw DatabaseError("PostgreSQL is not reachable", "", true);
    applied_before_ =
        pg::exec(connection_.get(),
                 "SELECT EXISTS (SELECT 1 FROM " + options_.schema.table("processed_events") +
                     " WHERE consumer_name = $1)",
                 {inbox_name().c_str()})
            .text(0, 0) == "t";
    return *applied_before_;
  }

  enum class Edge { first_message, after_last_message };

  // One entry per partition of the batch, at the offset of its first message in the batch or
  // just after its last one.
  static kafka::PartitionListHandle partitions_of(const std::vector<kafka::MessageHandle>& batch,
                                                  Edge edge) {
    kafka::PartitionListHandle list(rd_kafka_topic_partition_list_new(4));
    for (const auto& message : batch) {
      const char* topic = rd_kafka_topic_name(message->rkt);
      const std::int64_t offset =
          edge == Edge::first_message ? message->offset : message->offset + 1;
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

  // Seeks every partition of the batch back to its first message in the batch, so nothing of an
  // uncommitted batch is skipped, whether the caller keeps polling or restarts.
  void rewind(const std::vector<kafka::MessageHandle>& batch) {
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
  void store_offsets(const std::vector<kafka::MessageHandle>& batch) {
    const auto offsets = partitions_of(batch, Edge::after_last_message);
    if (const auto err = rd_kafka_offsets_store(handle_.get(), offsets.get())) {
      // Happens after a rebalance took a partition away: the new owner re-delivers, the inbox
      // turns that into a no-op.
      detail::log().warn("kafka consumer: offset store failed: {}", rd_kafka_err2str(err));
    }
  }

  KafkaConsumerOptions options_;
  Effect effect_;
  Inbox inbox_;
  pg::Connection connection_;
  kafka::KafkaHandle handle_;
  std::atomic<bool> stop_{false};
  std::string broken_;  // non-empty: unusable, says why
  struct Counters {
    OUTBOX_KAFKA_CONSUMER_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
  // Offset gaps seen by this consumer, (topic, partition, offset), so that one gap met again
  // after a rebalance or a new client counts once.
  std::set<std::tuple<std::string, std::int32_t, std::int64_t>> counted_gaps_;
  // What stopped each stopped partition (on_offset_gap=stop), until a new client.
  std::map<std::pair<std::string, std::int32_t>, std::string> stopped_partitions_;
  // on_offset_gap=skip: (topic, partition) -> (the gap's first offset, where to go on instead).
  std::map<std::pair<std::string, std::int32_t>, std::pair<std::int64_t, std::int64_t>> skip_from_;
  bool restart_ = false;                // poll() starts a new client after its batch
  std::optional<bool> applied_before_;  // inbox_has_applied() during one assignment
  std::chrono::steady_clock::time_point next_lag_{};
  bool effect_threw_ = false;  // the last batch failed in the effect, not in the inbox
  detail::HealthBoard health_;
};

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
