#include "support/kafka_reader.hpp"

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace outbox::testing {
namespace {

rd_kafka_t* make_client(rd_kafka_type_t type, const std::string& brokers,
                        const std::map<std::string, std::string>& extra) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  auto set = [&](const std::string& k, const std::string& v) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), error, sizeof(error)) != RD_KAFKA_CONF_OK) {
      throw std::runtime_error(error);
    }
  };
  set("bootstrap.servers", brokers);
  for (const auto& [k, v] : extra) set(k, v);
  rd_kafka_t* rk = rd_kafka_new(type, conf, error, sizeof(error));
  if (rk == nullptr) throw std::runtime_error(error);
  return rk;
}

ReadMessage to_read_message(const std::string& topic, const rd_kafka_message_t* m) {
  ReadMessage r;
  r.topic = topic;
  r.partition = m->partition;
  r.offset = m->offset;
  if (m->key) r.key.assign(static_cast<const char*>(m->key), m->key_len);
  if (m->payload) r.value.assign(static_cast<const char*>(m->payload), m->len);
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name = nullptr;
    const void* value = nullptr;
    std::size_t size = 0;
    for (std::size_t i = 0;
         rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      r.headers[name] = std::string(static_cast<const char*>(value), size);
    }
  }
  return r;
}

}  // namespace

std::map<int, long long> partition_ends(const std::string& brokers, const std::string& topic) {
  rd_kafka_t* rk =
      make_client(RD_KAFKA_CONSUMER, brokers, {{"group.id", "outbox-test-watermarks"}});
  std::map<int, long long> ends;
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &metadata, 5000);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR && metadata->topic_cnt != 1) {
    err = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
  }
  for (int p = 0; err == RD_KAFKA_RESP_ERR_NO_ERROR && p < metadata->topics[0].partition_cnt; ++p) {
    const int id = metadata->topics[0].partitions[p].id;
    int64_t low = 0, high = 0;
    err = rd_kafka_query_watermark_offsets(rk, topic.c_str(), id, &low, &high, 5000);
    ends[id] = high;
  }
  if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("the ends of topic " + topic +
                             "'s partitions: " + rd_kafka_err2str(err));
  }
  return ends;
}

namespace {

// Whether `messages` reach every partition's end in `ends`.
bool reached(const std::vector<ReadMessage>& messages, const std::map<int, long long>& ends) {
  std::map<int, long long> next;
  for (const auto& m : messages) next[m.partition] = std::max(next[m.partition], m.offset + 1);
  for (const auto& [partition, end] : ends) {
    if (end > 0 && next[partition] < end) return false;
  }
  return true;
}

void sort_by_offset(std::vector<ReadMessage>& messages) {
  std::sort(messages.begin(), messages.end(), [](const ReadMessage& a, const ReadMessage& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
}

}  // namespace

std::vector<ReadMessage> read_topic(const std::string& brokers, const std::string& topic,
                                    std::size_t expected, std::chrono::milliseconds timeout) {
  return read_topic_until(
      brokers, topic, [expected](const auto& messages) { return messages.size() >= expected; },
      timeout);
}

std::vector<ReadMessage> read_topic_until(
    const std::string& brokers, const std::string& topic,
    const std::function<bool(const std::vector<ReadMessage>&)>& done,
    std::chrono::milliseconds timeout) {
  rd_kafka_t* rk =
      make_client(RD_KAFKA_CONSUMER, brokers,
                  {{"group.id", "outbox-test-reader"}, {"enable.auto.commit", "false"}});
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  std::vector<ReadMessage> messages;
  if (rd_kafka_metadata(rk, 0, rkt, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
      metadata->topic_cnt == 1) {
    rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(16);
    for (int p = 0; p < metadata->topics[0].partition_cnt; ++p) {
      rd_kafka_topic_partition_list_add(assignment, topic.c_str(),
                                        metadata->topics[0].partitions[p].id)
          ->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(rk, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done(messages) && std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) messages.push_back(to_read_message(topic, m));
      rd_kafka_message_destroy(m);
    }
  }
  if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
  rd_kafka_topic_destroy(rkt);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  sort_by_offset(messages);
  return messages;
}

std::vector<ReadMessage> read_whole_topic(const std::string& brokers, const std::string& topic,
                                          std::chrono::milliseconds timeout) {
  const std::map<int, long long> ends = partition_ends(brokers, topic);
  return read_topic_until(
      brokers, topic,
      [&ends](const std::vector<ReadMessage>& so_far) { return reached(so_far, ends); }, timeout);
}

std::vector<OffsetGap> offset_gaps(const std::vector<ReadMessage>& messages,
                                   const std::map<int, long long>& ends) {
  std::vector<OffsetGap> gaps;
  std::map<int, long long> next_offset;
  for (const auto& [partition, end] : ends) next_offset[partition] = 0;
  for (const auto& m : messages) {
    long long& next = next_offset[m.partition];
    if (m.offset > next) gaps.push_back({m.partition, next, m.offset - 1});
    next = std::max(next, m.offset + 1);
  }
  for (const auto& [partition, end] : ends) {
    const long long next = next_offset[partition];
    if (end > next) gaps.push_back({partition, next, end - 1});
  }
  std::sort(gaps.begin(), gaps.end(), [](const OffsetGap& a, const OffsetGap& b) {
    return std::tie(a.partition, a.first) < std::tie(b.partition, b.first);
  });
  return gaps;
}

std::ostream& operator<<(std::ostream& out, const OffsetGap& gap) {
  return out << "partition " << gap.partition << ": offsets " << gap.first << " to " << gap.last;
}

struct TopicTail::State {
  std::string brokers, topic;
  std::set<std::string> keep_headers;
  std::mutex mutex;
  std::vector<ReadMessage> messages;  // guarded by mutex
  std::map<int, long long> next;      // each partition's next offset to read; guarded by mutex
  std::string error;                  // the first error the tail read; guarded by mutex
  std::atomic<bool> stopping{false};
  std::thread thread;
};

namespace {

// The tail's consumer, assigned every partition of the topic from offset 0; throws when it cannot.
rd_kafka_t* tail_consumer(const std::string& brokers, const std::string& topic) {
  // A tail that falls behind what the broker keeps must say so, not jump to the end.
  rd_kafka_t* rk = make_client(RD_KAFKA_CONSUMER, brokers,
                               {{"group.id", "outbox-test-tail"},
                                {"enable.auto.commit", "false"},
                                {"auto.offset.reset", "error"}});
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &metadata, 5000);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR &&
      (metadata->topic_cnt != 1 || metadata->topics[0].partition_cnt == 0)) {
    err = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
  }
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_topic_partition_list_t* assignment =
        rd_kafka_topic_partition_list_new(metadata->topics[0].partition_cnt);
    for (int p = 0; p < metadata->topics[0].partition_cnt; ++p) {
      rd_kafka_topic_partition_list_add(assignment, topic.c_str(),
                                        metadata->topics[0].partitions[p].id)
          ->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    err = rd_kafka_assign(rk, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
  }
  if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_destroy(rk);
    throw std::runtime_error("TopicTail: cannot read topic " + topic +
                             " from its start: " + rd_kafka_err2str(err));
  }
  return rk;
}

}  // namespace

TopicTail::TopicTail(std::string brokers, std::string topic, std::set<std::string> keep_headers)
    : state_(std::make_unique<State>()) {
  state_->brokers = std::move(brokers);
  state_->topic = std::move(topic);
  state_->keep_headers = std::move(keep_headers);
  rd_kafka_t* rk = tail_consumer(state_->brokers, state_->topic);
  try {
    state_->thread = std::thread([state = state_.get(), rk] {
      while (!state->stopping.load()) {
        rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
        if (m == nullptr) continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
          ReadMessage read = to_read_message(state->topic, m);
          read.value.clear();  // not kept: a long run's topic is a gigabyte
          std::erase_if(read.headers, [&](const auto& header) {
            return !state->keep_headers.contains(header.first);
          });
          const std::lock_guard lock(state->mutex);
          long long& next = state->next[read.partition];
          next = std::max(next, read.offset + 1);
          state->messages.push_back(std::move(read));
        } else {
          const std::lock_guard lock(state->mutex);
          if (state->error.empty()) {
            state->error =
                fmt::format("partition {}: {}", m->partition, rd_kafka_message_errstr(m));
          }
        }
        rd_kafka_message_destroy(m);
      }
      rd_kafka_consumer_close(rk);
      rd_kafka_destroy(rk);
    });
  } catch (...) {
    rd_kafka_destroy(rk);
    throw;
  }
}

TopicTail::~TopicTail() {
  state_->stopping = true;
  state_->thread.join();
}

std::vector<ReadMessage> TopicTail::read_to_end(std::chrono::milliseconds timeout) {
  const std::map<int, long long> ends = partition_ends(state_->brokers, state_->topic);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<ReadMessage> messages;
    bool done = false;
    {
      const std::lock_guard lock(state_->mutex);
      if (!state_->error.empty()) {
        throw std::runtime_error("TopicTail: " + state_->topic + ": " + state_->error);
      }
      done = std::all_of(ends.begin(), ends.end(), [&](const auto& end) {
        const auto next = state_->next.find(end.first);
        return end.second == 0 || (next != state_->next.end() && next->second >= end.second);
      });
      if (!done && std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(fmt::format("TopicTail: {} not read to its end within {} ms",
                                             state_->topic, timeout.count()));
      }
      if (done) messages = state_->messages;
    }
    if (done) {
      sort_by_offset(messages);
      return messages;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void produce_raw(const std::string& brokers, const std::string& topic, const std::string& key,
                 const std::string& value, const std::map<std::string, std::string>& headers) {
  rd_kafka_t* rk = make_client(RD_KAFKA_PRODUCER, brokers, {{"acks", "all"}});
  rd_kafka_headers_t* hdrs = rd_kafka_headers_new(headers.size());
  for (const auto& [k, v] : headers) rd_kafka_header_add(hdrs, k.c_str(), -1, v.data(), v.size());
  const auto err = rd_kafka_producev(
      rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(key.data(), key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(hdrs);
    rd_kafka_destroy(rk);
    throw std::runtime_error(rd_kafka_err2str(err));
  }
  const auto flushed = rd_kafka_flush(rk, 10000);
  rd_kafka_destroy(rk);
  if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR)
    throw std::runtime_error("produce_raw: flush timed out");
}

void produce_to_partition(const std::string& brokers, const std::string& topic, int partition,
                          const std::vector<RawMessage>& messages) {
  rd_kafka_t* rk = make_client(RD_KAFKA_PRODUCER, brokers, {{"acks", "all"}});
  for (const RawMessage& m : messages) {
    rd_kafka_headers_t* hdrs = rd_kafka_headers_new(m.headers.size());
    for (const auto& [k, v] : m.headers) {
      rd_kafka_header_add(hdrs, k.c_str(), -1, v.data(), static_cast<ssize_t>(v.size()));
    }
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    do {
      err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
                              RD_KAFKA_V_KEY(m.key.data(), m.key.size()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(m.value.data()), m.value.size()),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs),
                              RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) rd_kafka_poll(rk, 100);
    } while (err == RD_KAFKA_RESP_ERR__QUEUE_FULL);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_headers_destroy(hdrs);
      rd_kafka_destroy(rk);
      throw std::runtime_error(rd_kafka_err2str(err));
    }
  }
  const auto flushed = rd_kafka_flush(rk, 30000);
  rd_kafka_destroy(rk);
  if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("produce_to_partition: flush timed out");
  }
}

std::pair<long long, long long> watermarks(const std::string& brokers, const std::string& topic,
                                           int partition) {
  rd_kafka_t* rk = make_client(RD_KAFKA_CONSUMER, brokers, {{"group.id", "watermarks"}});
  int64_t low = -1, high = -1;
  const auto err =
      rd_kafka_query_watermark_offsets(rk, topic.c_str(), partition, &low, &high, 5000);
  rd_kafka_destroy(rk);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw std::runtime_error(rd_kafka_err2str(err));
  return {low, high};
}

}  // namespace outbox::testing
