#include "outbox/testing/kafka_mock.hpp"

#include <fmt/format.h>

#include <vector>

#include "kafka/kafka_common.hpp"
// After rdkafka.h (from kafka_common.hpp), as it demands.
#include <librdkafka/rdkafka_mock.h>

namespace outbox {

class KafkaMockCluster::Impl {
 public:
  explicit Impl(int brokers) : brokers_(brokers) {
    if (brokers < 1 || brokers > kMaxBrokers) {
      throw InvalidArgument(
          fmt::format("mock cluster: {} brokers; use 1..{}", brokers, kMaxBrokers));
    }
    // The mock cluster lives inside a client instance; this one is never used to produce.
    kafka::ConfHandle conf(rd_kafka_conf_new());
    kafka::set(conf.get(), "log_level", "3");
    handle_ = kafka::create(RD_KAFKA_PRODUCER, std::move(conf));
    cluster_ = rd_kafka_mock_cluster_new(handle_.get(), brokers);
    if (cluster_ == nullptr) throw BrokerError("cannot start the Kafka mock cluster", 0, false);
    bootstrap_ = rd_kafka_mock_cluster_bootstraps(cluster_);
  }

  ~Impl() {
    if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
  }

  void check(rd_kafka_resp_err_t err, const char* what) const {
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw BrokerError(fmt::format("mock cluster: {}: {}", what, rd_kafka_err2str(err)), err,
                        false);
    }
  }

  int brokers_;
  kafka::KafkaHandle handle_;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstrap_;
};

KafkaMockCluster::KafkaMockCluster(int brokers) : impl_(std::make_unique<Impl>(brokers)) {}
KafkaMockCluster::~KafkaMockCluster() = default;

const std::string& KafkaMockCluster::bootstrap_servers() const noexcept {
  return impl_->bootstrap_;
}

void KafkaMockCluster::create_topic(const std::string& topic, int partitions,
                                    int replication_factor) {
  impl_->check(
      rd_kafka_mock_topic_create(impl_->cluster_, topic.c_str(), partitions, replication_factor),
      "create topic");
}

void KafkaMockCluster::fail_next_produce_requests(int count, int error_code) {
  std::vector<rd_kafka_resp_err_t> errors(static_cast<std::size_t>(count),
                                          static_cast<rd_kafka_resp_err_t>(error_code));
  rd_kafka_mock_push_request_errors_array(impl_->cluster_, /*ApiKey Produce=*/0, errors.size(),
                                          errors.data());
}

void KafkaMockCluster::set_broker_down(std::int32_t broker_id, bool down) {
  impl_->check(down ? rd_kafka_mock_broker_set_down(impl_->cluster_, broker_id)
                    : rd_kafka_mock_broker_set_up(impl_->cluster_, broker_id),
               "set broker state");
}

void KafkaMockCluster::set_broker_rtt(std::int32_t broker_id, int rtt_ms) {
  impl_->check(rd_kafka_mock_broker_set_rtt(impl_->cluster_, broker_id, rtt_ms), "set rtt");
}

int KafkaMockCluster::broker_count() const noexcept { return impl_->brokers_; }

}  // namespace outbox
