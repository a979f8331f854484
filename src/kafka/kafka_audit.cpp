#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include "kafka/kafka_common.hpp"
#include "ops/audit_rows.hpp"
#include "outbox/audit.hpp"
#include "outbox/duration.hpp"
#include "outbox/kafka_sink.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

// Every message of `topic` from `from_ms` to the end each partition had when this started: the
// event id of each (nil when it has none) and whether it was produced in [begin_ms, end_ms).
struct Read {
  std::vector<std::pair<EventId, bool>> messages;
};

// A consumer that reads by assignment and commits nothing.
kafka::KafkaHandle audit_consumer(const AuditOptions& options) {
  kafka::ConfHandle conf(rd_kafka_conf_new());
  kafka::set(conf.get(), "bootstrap.servers", options.brokers);
  kafka::set(conf.get(), "group.id", "outbox-audit");  // assign() only: nothing is committed
  kafka::set(conf.get(), "enable.auto.commit", "false");
  // An end-of-partition event ends a partition's read even when its last offsets hold no
  // message (a transaction's commit marker, aborted records): waiting for offset end-1 would
  // wait for ever.
  kafka::set(conf.get(), "enable.partition.eof", "true");
  for (const auto& [key, value] : options.properties) kafka::set(conf.get(), key, value);
  // Not the consumer's default (jump to the end): an offset retention deleted while this reads
  // would skip the rest of the partition, and every published row in it would read as lost.
  kafka::set(conf.get(), "auto.offset.reset", "error");
  return kafka::create(RD_KAFKA_CONSUMER, std::move(conf));
}

// How many partitions the topic has; InvalidArgument when it does not exist.
int partition_count(rd_kafka_t* handle, const AuditOptions& options, int timeout) {
  rd_kafka_topic_t* topic = rd_kafka_topic_new(handle, options.topic.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  const auto err = rd_kafka_metadata(handle, 0, topic, &metadata, timeout);
  rd_kafka_topic_destroy(topic);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw BrokerError(
        fmt::format("audit: no metadata for topic {}: {}", options.topic, rd_kafka_err2str(err)),
        static_cast<int>(err), true);
  }
  int partitions = 0;
  if (metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    partitions = metadata->topics[0].partition_cnt;
  }
  rd_kafka_metadata_destroy(metadata);
  if (partitions == 0) {
    throw InvalidArgument("audit: the topic " + options.topic + " does not exist on " +
                          options.brokers);
  }
  return partitions;
}

// Where each partition ends now (into `end`), and each partition's entry at the window's start
// (less the slack) as a timestamp to look up, or at its beginning.
kafka::PartitionListHandle ends_and_window_start(rd_kafka_t* handle, const AuditOptions& options,
                                                 std::int64_t from_ms,
                                                 std::vector<std::int64_t>& low,
                                                 std::vector<std::int64_t>& end, int timeout) {
  const int partitions = static_cast<int>(end.size());
  kafka::PartitionListHandle start(rd_kafka_topic_partition_list_new(partitions));
  for (int p = 0; p < partitions; ++p) {
    const auto werr = rd_kafka_query_watermark_offsets(handle, options.topic.c_str(), p, &low[p],
                                                       &end[p], timeout);
    if (werr != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw BrokerError(fmt::format("audit: {} [{}]: {}", options.topic, p, rd_kafka_err2str(werr)),
                        static_cast<int>(werr), true);
    }
    rd_kafka_topic_partition_list_add(start.get(), options.topic.c_str(), p)->offset = from_ms;
  }
  if (options.from_beginning) {
    for (int i = 0; i < start->cnt; ++i) start->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  return start;
}

// Partitions whose time lookup answered "no message at or after from_ms" although they hold
// messages: true when a last message is in fact from from_ms or later, which a broker that cannot
// look offsets up by time (librdkafka's mock among them) answers for every time. Reads that one
// message of each; a partition whose last offset holds none (a transaction marker) or fails
// proves nothing. Bounded by `timeout`.
bool lookup_by_time_is_broken(rd_kafka_t* handle, const AuditOptions& options,
                              const std::vector<int>& partitions,
                              const std::vector<std::int64_t>& end, std::int64_t from_ms,
                              int timeout) {
  kafka::PartitionListHandle last(
      rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size())));
  for (const int p : partitions) {
    rd_kafka_topic_partition_list_add(last.get(), options.topic.c_str(), p)->offset = end[p] - 1;
  }
  if (rd_kafka_assign(handle, last.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
  std::unordered_set<int> answered;  // a message, an end of partition or an error each
  bool newer = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
  while (answered.size() < partitions.size() && !newer &&
         std::chrono::steady_clock::now() < deadline) {
    kafka::MessageHandle message(rd_kafka_consumer_poll(handle, 200));
    if (!message) continue;
    if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_timestamp_type_t type;
      newer = rd_kafka_message_timestamp(message.get(), &type) >= from_ms;
    }
    answered.insert(message->partition);
  }
  rd_kafka_assign(handle, nullptr);
  return newer;
}

// Turns `start`'s timestamps (or beginnings) into offsets to assign, and returns them by
// partition: where each partition's read begins.
std::vector<std::int64_t> resolve_start_offsets(rd_kafka_t* handle, const AuditOptions& options,
                                                rd_kafka_topic_partition_list_t* start,
                                                const std::vector<std::int64_t>& low,
                                                const std::vector<std::int64_t>& end,
                                                std::int64_t from_ms, int timeout) {
  const auto terr = options.from_beginning ? RD_KAFKA_RESP_ERR_NO_ERROR
                                           : rd_kafka_offsets_for_times(handle, start, timeout);
  if (terr != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw BrokerError(fmt::format("audit: offsets for the window's start in {}: {}", options.topic,
                                  rd_kafka_err2str(terr)),
                      static_cast<int>(terr), true);
  }
  std::vector<std::int64_t> next(end.size(), 0);
  std::vector<int> none_after;  // partitions with messages but none at or after from_ms
  for (int i = 0; i < start->cnt; ++i) {
    rd_kafka_topic_partition_t& entry = start->elems[i];
    if (!options.from_beginning && entry.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw BrokerError(fmt::format("audit: {} [{}]: the window's start offset: {}", options.topic,
                                    entry.partition, rd_kafka_err2str(entry.err)),
                        static_cast<int>(entry.err), true);
    }
    if (options.from_beginning) {
      entry.offset = low[entry.partition];  // its first offset, read with its end
    } else if (entry.offset < 0) {
      // -1: no message at or after that time: nothing to read in this partition.
      if (end[entry.partition] > low[entry.partition]) none_after.push_back(entry.partition);
      entry.offset = end[entry.partition];
    }
    next[entry.partition] = entry.offset;
  }
  if (!none_after.empty() &&
      lookup_by_time_is_broken(handle, options, none_after, end, from_ms, timeout)) {
    // Reading nothing would report every published event in the window lost.
    throw BrokerError(
        fmt::format("audit: the broker at {} cannot look offsets of {} up by time: it answered "
                    "\"no message since the window's start\" for a partition whose last message "
                    "is newer; run the audit with --from-beginning (it reads each partition from "
                    "its first message)",
                    options.brokers, options.topic),
        0, false);
  }
  return next;
}

// Polls the assigned partitions from `next` until each reached its `end`, within the read timeout.
Read read_to_end(rd_kafka_t* handle, const AuditOptions& options,
                 const std::vector<std::int64_t>& end, std::vector<std::int64_t>& next,
                 std::int64_t begin_ms, std::int64_t end_ms) {
  const int partitions = static_cast<int>(end.size());
  Read read;
  const auto deadline = std::chrono::steady_clock::now() + options.read_timeout;
  const auto done = [&] {
    for (int p = 0; p < partitions; ++p) {
      if (next[p] < end[p]) return false;
    }
    return true;
  };
  std::string last_error;  // a transient one, for the timeout's message
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw BrokerError(fmt::format("audit: could not read {} to its end within {} ms{}",
                                    options.topic, options.read_timeout.count(),
                                    last_error.empty() ? "" : " (last error: " + last_error + ")"),
                        0, true);
    }
    kafka::MessageHandle message(rd_kafka_consumer_poll(handle, 200));
    if (!message) continue;
    const int p = message->partition;
    if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (p >= 0 && p < partitions && message->offset >= end[p]) next[p] = end[p];
      continue;
    }
    if (message->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
        message->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
      throw BrokerError(
          fmt::format("audit: {} [{}]: messages of the window are no longer on the broker "
                      "(retention deleted them while this read: {}); audit a later window",
                      options.topic, p, rd_kafka_message_errstr(message.get())),
          static_cast<int>(message->err), false);
    }
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      last_error = rd_kafka_message_errstr(message.get());  // librdkafka retries these
      continue;
    }
    if (p < 0 || p >= partitions || message->offset >= end[p]) continue;
    next[p] = std::max(next[p], message->offset + 1);
    rd_kafka_headers_t* headers = nullptr;
    rd_kafka_message_headers(message.get(), &headers);
    const EventId id =
        EventId::parse(kafka::header(headers, kafka::kHeaderEventId)).value_or(EventId{});
    rd_kafka_timestamp_type_t type;
    const std::int64_t at = rd_kafka_message_timestamp(message.get(), &type);
    read.messages.emplace_back(id, at >= begin_ms && at < end_ms);
  }
  return read;
}

Read read_topic(const AuditOptions& options, std::int64_t from_ms, std::int64_t begin_ms,
                std::int64_t end_ms) {
  const kafka::KafkaHandle handle = audit_consumer(options);
  const int timeout = static_cast<int>(std::min<std::int64_t>(options.read_timeout.count(), 30000));
  const int partitions = partition_count(handle.get(), options, timeout);
  std::vector<std::int64_t> low(partitions, 0), end(partitions, 0);
  const kafka::PartitionListHandle start =
      ends_and_window_start(handle.get(), options, from_ms, low, end, timeout);
  std::vector<std::int64_t> next =
      resolve_start_offsets(handle.get(), options, start.get(), low, end, from_ms, timeout);
  if (const auto aerr = rd_kafka_assign(handle.get(), start.get())) {
    throw BrokerError(std::string("audit: assign: ") + rd_kafka_err2str(aerr),
                      static_cast<int>(aerr), true);
  }
  Read read = read_to_end(handle.get(), options, end, next, begin_ms, end_ms);
  rd_kafka_assign(handle.get(), nullptr);
  return read;
}

}  // namespace

AuditReport audit_topic(const AuditOptions& options) {
  detail::check_audit_window(options);
  if (options.topic.empty()) throw InvalidArgument("audit needs the topic to read");
  return detail::run_audit(
      options,
      [&](const Event& row) { return render_topic(options.topic_template, row) == options.topic; },
      [&](std::int64_t from_ms, std::int64_t begin_ms, std::int64_t end_ms) {
        return read_topic(options, from_ms, begin_ms, end_ms).messages;
      });
}

}  // namespace outbox
