#pragma once
// librdkafka handles and configuration, shared by the sink, the consumer and the mock cluster.

#include <librdkafka/rdkafka.h>

#include <map>
#include <string>

#include "common/event_headers.hpp"
#include "common/holder.hpp"
#include "outbox/error.hpp"

namespace outbox::kafka {

using KafkaHandle = detail::Holder<rd_kafka_t, &rd_kafka_destroy>;
using ConfHandle = detail::Holder<rd_kafka_conf_t, &rd_kafka_conf_destroy>;
using HeadersHandle = detail::Holder<rd_kafka_headers_t, &rd_kafka_headers_destroy>;
using PartitionListHandle =
    detail::Holder<rd_kafka_topic_partition_list_t, &rd_kafka_topic_partition_list_destroy>;
using MessageHandle = detail::Holder<rd_kafka_message_t, &rd_kafka_message_destroy>;

// Sets one property; throws ConfigError naming the property and librdkafka's reason.
inline void set(rd_kafka_conf_t* conf, const std::string& key, const std::string& value) {
  char error[512] = {};
  if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), error, sizeof(error)) !=
      RD_KAFKA_CONF_OK) {
    throw ConfigError("Kafka property " + key + "=" + value + ": " + error);
  }
}

// Creates a client; librdkafka takes ownership of `conf` only when it succeeds. It fails only on
// configuration (for example properties that contradict the idempotent producer), never on
// connectivity: it connects later, in the background.
inline KafkaHandle create(rd_kafka_type_t type, ConfHandle conf) {
  char error[512] = {};
  rd_kafka_t* handle = rd_kafka_new(type, conf.get(), error, sizeof(error));
  if (handle == nullptr) {
    throw ConfigError(std::string("cannot create Kafka client: ") + error);
  }
  conf.release();  // now owned by `handle`
  return KafkaHandle(handle);
}

using detail::kHeaderAggregateSequence;
using detail::kHeaderAggregateType;
using detail::kHeaderEventId;
using detail::kHeaderEventType;
using detail::kHeaderSchemaVersion;

}  // namespace outbox::kafka
