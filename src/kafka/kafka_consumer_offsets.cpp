// Where each partition KafkaInboxConsumer is assigned starts (the group's committed offset, the
// log start for a new group, past a gap on_offset_gap=skip met), and what an offset gap does: a
// committed offset the broker no longer holds stops the partition or, with on_offset_gap=skip, is
// counted, logged and passed; never a silent jump. See kafka_consumer_impl.hpp.

#include <fmt/format.h>

#include <cstring>

#include "common/log.hpp"
#include "common/printable.hpp"
#include "kafka/kafka_consumer_impl.hpp"

namespace outbox {

// librdkafka could not fetch a partition from the offset it had (auto.offset.reset=error) and
// stopped fetching it: either choose_start_offsets() gave it no offset (offset < 0: stopped at
// a gap there, or the lookup failed) or the broker no longer holds that offset.
void KafkaInboxConsumer::Impl::on_offset_reset(const rd_kafka_message_t& error) {
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
  const auto err =
      rd_kafka_query_watermark_offsets(handle_.get(), topic.c_str(), partition, &low, &high, 5000);
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
bool KafkaInboxConsumer::Impl::meet_gap(const std::string& topic, std::int32_t partition,
                                        std::int64_t from, std::int64_t missing,
                                        const std::string& gap) {
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
void KafkaInboxConsumer::Impl::on_rebalance(rd_kafka_t* handle, rd_kafka_resp_err_t err,
                                            rd_kafka_topic_partition_list_t* partitions,
                                            void* opaque) {
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

void KafkaInboxConsumer::Impl::forget_stopped(const rd_kafka_topic_partition_list_t* partitions) {
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
void KafkaInboxConsumer::Impl::choose_start_offsets(rd_kafka_t* handle,
                                                    rd_kafka_topic_partition_list_t* partitions) {
  applied_before_.reset();  // asked at most once per assignment
  if (const auto err = rd_kafka_committed(handle, partitions, 10000)) {
    detail::log().warn("kafka consumer {}: committed offsets could not be read: {}",
                       options_.group_id, rd_kafka_err2str(err));
    for (int i = 0; i < partitions->cnt; ++i) partitions->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
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
std::int64_t KafkaInboxConsumer::Impl::start_without_committed_offset(
    rd_kafka_t* handle, const char* topic, std::int32_t partition) noexcept {
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

const std::string& KafkaInboxConsumer::Impl::inbox_name() const {
  return options_.consumer_name.empty() ? options_.group_id : options_.consumer_name;
}

bool KafkaInboxConsumer::Impl::inbox_has_applied() {
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

}  // namespace outbox
