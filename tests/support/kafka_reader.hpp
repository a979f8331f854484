#pragma once
// Reads back what reached the Kafka mock cluster, and produces raw messages, for assertions.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace outbox::testing {

struct ReadMessage {
  std::string topic;
  int partition = 0;
  long long offset = 0;
  std::string key;
  std::string value;
  std::map<std::string, std::string> headers;
};

// Reads every partition of `topic` from the beginning until `expected` messages arrived or
// `timeout` passed; returns them in (partition, offset) order.
std::vector<ReadMessage> read_topic(const std::string& brokers, const std::string& topic,
                                    std::size_t expected, std::chrono::milliseconds timeout);

// Same, reading until `done(messages so far)` or `timeout`.
std::vector<ReadMessage> read_topic_until(
    const std::string& brokers, const std::string& topic,
    const std::function<bool(const std::vector<ReadMessage>&)>& done,
    std::chrono::milliseconds timeout);

// Reads every message that is on `topic` now: each partition up to its high watermark.
std::vector<ReadMessage> read_whole_topic(const std::string& brokers, const std::string& topic,
                                          std::chrono::milliseconds timeout);

// Produces one message and waits for its acknowledgement.
void produce_raw(const std::string& brokers, const std::string& topic, const std::string& key,
                 const std::string& value, const std::map<std::string, std::string>& headers);

struct RawMessage {
  std::string key;
  std::string value;
  std::map<std::string, std::string> headers;
};

// Produces `messages` to one partition, in order, and waits for their acknowledgements.
void produce_to_partition(const std::string& brokers, const std::string& topic, int partition,
                          const std::vector<RawMessage>& messages);

// The partition's log start and end offsets (low and high watermarks) as the broker has them now.
std::pair<long long, long long> watermarks(const std::string& brokers, const std::string& topic,
                                           int partition);

}  // namespace outbox::testing
