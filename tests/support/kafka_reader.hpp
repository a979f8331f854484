#pragma once
// Reads back what reached the Kafka mock cluster, and produces raw messages, for assertions.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <set>
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

// The end of each partition of `topic` (its next offset), as its leader sees it now; throws when
// the broker does not say.
std::map<int, long long> partition_ends(const std::string& brokers, const std::string& topic);

// Offsets missing from `messages` (in (partition, offset) order, as the readers here return them),
// counted from offset 0 of each partition to its end in `ends` (partitions with nothing read
// included): messages a broker dropped before they were read, or not read yet.
struct OffsetGap {
  int partition = 0;
  long long first = 0, last = 0;  // the first and the last offset missing
  bool operator==(const OffsetGap&) const = default;
};
// For test failures: "partition P: offsets F to L".
std::ostream& operator<<(std::ostream& out, const OffsetGap& gap);
std::vector<OffsetGap> offset_gaps(const std::vector<ReadMessage>& messages,
                                   const std::map<int, long long>& ends = {});

// Reads a topic from its beginning for as long as it lives, on a thread of its own, so that a
// broker that drops a partition's oldest messages (librdkafka's mock keeps 5 MiB a partition)
// cannot hide what was published first: the checker sees every message as long as the tail stays
// within 5 MiB of each partition's end (behind that, read_to_end throws: the tail never skips).
// It keeps each message's partition, offset, key and the headers named in `keep_headers`, not its
// value (a long run's topic is a gigabyte). The topic must exist before it starts.
class TopicTail {
 public:
  TopicTail(std::string brokers, std::string topic, std::set<std::string> keep_headers);
  ~TopicTail();
  TopicTail(const TopicTail&) = delete;
  TopicTail& operator=(const TopicTail&) = delete;
  // Everything read, once each partition is read to the end it has now; (partition, offset)
  // order. Throws when the tail could not read a partition or did not reach the ends within
  // `timeout`. The tail goes on reading.
  std::vector<ReadMessage> read_to_end(std::chrono::milliseconds timeout);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

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
