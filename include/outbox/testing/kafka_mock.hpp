#pragma once
// librdkafka's Kafka-protocol mock cluster, listening on loopback TCP: the embedded broker for the
// demo and the tests. Any Kafka client can talk to it. It keeps messages in memory only.

#include <cstdint>
#include <memory>
#include <string>

namespace outbox {

class KafkaMockCluster {
 public:
  static constexpr int kDefaultBrokers = 3;
  static constexpr int kMaxBrokers = 64;
  // librdkafka's mock creates a topic it has not seen with this many partitions on first use.
  static constexpr int kAutoCreatedPartitions = 4;

  // Starts `brokers` mock brokers (1..kMaxBrokers) on 127.0.0.1 (random ports). Throws
  // InvalidArgument for a count outside that, BrokerError on failure.
  explicit KafkaMockCluster(int brokers = kDefaultBrokers);
  ~KafkaMockCluster();
  KafkaMockCluster(const KafkaMockCluster&) = delete;
  KafkaMockCluster& operator=(const KafkaMockCluster&) = delete;

  // "127.0.0.1:port,127.0.0.1:port,..." for bootstrap.servers.
  [[nodiscard]] const std::string& bootstrap_servers() const noexcept;

  // Creates a topic ahead of use (otherwise topics are created on first use).
  void create_topic(const std::string& topic, int partitions, int replication_factor = 1);
  // Makes the next `count` Produce requests fail with Kafka error `error_code`
  // (e.g. 7 = REQUEST_TIMED_OUT, 6 = NOT_LEADER_OR_FOLLOWER).
  void fail_next_produce_requests(int count, int error_code);
  // Takes a broker down (closes its connections, refuses new ones) or brings it back. Ids 1..n.
  void set_broker_down(std::int32_t broker_id, bool down);
  // Adds `rtt_ms` of latency to every response of a broker.
  void set_broker_rtt(std::int32_t broker_id, int rtt_ms);
  [[nodiscard]] int broker_count() const noexcept;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
