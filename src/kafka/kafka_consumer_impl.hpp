#pragma once
// KafkaInboxConsumer's state, shared by its two files: kafka_consumer.cpp (the loop: poll, apply a
// batch through the inbox, store its offsets, the lag gauge) and kafka_consumer_offsets.cpp (where
// each assigned partition starts, and what an offset gap does). Not thread-safe beyond what
// outbox/kafka_consumer.hpp promises: request_stop() and stats() from any thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/health_board.hpp"
#include "common/stat_list.hpp"
#include "inbox/apply_batch.hpp"
#include "kafka/kafka_common.hpp"
#include "outbox/kafka_consumer.hpp"
#include "pg/connection.hpp"

namespace outbox {

class KafkaInboxConsumer::Impl {
 public:
  Impl(KafkaConsumerOptions options, Effect effect);
  ~Impl() { close_kafka(); }

  void run();
  std::size_t poll(std::chrono::milliseconds max_wait);
  void request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  bool stopped() const noexcept { return stop_.load(std::memory_order_relaxed); }
  KafkaConsumerStats stats() const;

 private:
  // The loop (kafka_consumer.cpp).
  kafka::KafkaHandle connect_kafka();
  void replace_client();
  void close_kafka() noexcept;
  void handle(const std::vector<kafka::MessageHandle>& batch);
  void measure_lag();
  void settle();
  void rewind(const std::vector<kafka::MessageHandle>& batch);
  void store_offsets(const std::vector<kafka::MessageHandle>& batch);

  // Where partitions start, and offset gaps (kafka_consumer_offsets.cpp).
  void on_offset_reset(const rd_kafka_message_t& error);
  bool meet_gap(const std::string& topic, std::int32_t partition, std::int64_t from,
                std::int64_t missing, const std::string& gap);
  static void on_rebalance(rd_kafka_t* handle, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t* partitions, void* opaque);
  void forget_stopped(const rd_kafka_topic_partition_list_t* partitions);
  void choose_start_offsets(rd_kafka_t* handle, rd_kafka_topic_partition_list_t* partitions);
  std::int64_t start_without_committed_offset(rd_kafka_t* handle, const char* topic,
                                              std::int32_t partition) noexcept;
  const std::string& inbox_name() const;
  bool inbox_has_applied();

  KafkaConsumerOptions options_;
  Effect effect_;
  detail::InboxApplier inbox_;
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

}  // namespace outbox
