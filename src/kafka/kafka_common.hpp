#pragma once
// librdkafka handles and configuration, shared by the sink, the consumer and the mock cluster.

#include <librdkafka/rdkafka.h>

#include <map>
#include <string>

#include "common/event_headers.hpp"
#include "common/holder.hpp"
#include "common/log.hpp"
#include "common/redact.hpp"
#include "outbox/error.hpp"

namespace outbox::kafka {

using KafkaHandle = detail::Holder<rd_kafka_t, &rd_kafka_destroy>;
using ConfHandle = detail::Holder<rd_kafka_conf_t, &rd_kafka_conf_destroy>;
using HeadersHandle = detail::Holder<rd_kafka_headers_t, &rd_kafka_headers_destroy>;
using PartitionListHandle =
    detail::Holder<rd_kafka_topic_partition_list_t, &rd_kafka_topic_partition_list_destroy>;
using MessageHandle = detail::Holder<rd_kafka_message_t, &rd_kafka_message_destroy>;

// Sets one property; throws ConfigError naming the property and librdkafka's reason. The value is
// shown only for a known property that holds no secret: a misspelt "sasl.pasword" is unknown, and
// its value is a password all the same.
inline void set(rd_kafka_conf_t* conf, const std::string& key, const std::string& value) {
  char error[512] = {};
  const rd_kafka_conf_res_t result =
      rd_kafka_conf_set(conf, key.c_str(), value.c_str(), error, sizeof(error));
  if (result != RD_KAFKA_CONF_OK) {
    const bool show = result != RD_KAFKA_CONF_UNKNOWN && !detail::is_secret_kafka_property(key);
    throw ConfigError("Kafka property " + key + "=" +
                      (show ? value : std::string(detail::kRedacted)) + ": " +
                      detail::scrub(error, {value}));
  }
}

// librdkafka's own lines (a broker down, a request timed out) through the library's logger, so
// they share its format (--log-format json) and level instead of going to stderr as plain text.
// Called on librdkafka's threads; spdlog's logger is thread-safe. Levels are syslog's.
inline void log_line(const rd_kafka_t* handle, int level, const char* facility, const char* text) {
  spdlog::level::level_enum mapped = spdlog::level::debug;
  if (level <= 3) {
    mapped = spdlog::level::err;
  } else if (level == 4) {
    mapped = spdlog::level::warn;
  } else if (level <= 6) {
    mapped = spdlog::level::info;
  }
  detail::log().log(mapped, "kafka {} {}: {}", handle != nullptr ? rd_kafka_name(handle) : "-",
                    facility != nullptr ? facility : "-", text != nullptr ? text : "");
}

// Creates a client; librdkafka takes ownership of `conf` only when it succeeds. It fails only on
// configuration (for example properties that contradict the idempotent producer), never on
// connectivity: it connects later, in the background. Its log lines go to log_line().
inline KafkaHandle create(rd_kafka_type_t type, ConfHandle conf) {
  rd_kafka_conf_set_log_cb(conf.get(), &log_line);
  char error[512] = {};
  rd_kafka_t* handle = rd_kafka_new(type, conf.get(), error, sizeof(error));
  if (handle == nullptr) {
    throw ConfigError(std::string("cannot create Kafka client: ") + error);
  }
  conf.release();  // now owned by `handle`
  return KafkaHandle(handle);
}

// The last value of header `name`, empty when the message has none.
inline std::string header(rd_kafka_headers_t* headers, const char* name) {
  const void* value = nullptr;
  std::size_t size = 0;
  if (headers == nullptr ||
      rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      value == nullptr) {
    return {};
  }
  return {static_cast<const char*>(value), size};
}

using detail::kHeaderAggregateSequence;
using detail::kHeaderAggregateType;
using detail::kHeaderEventId;
using detail::kHeaderEventType;
using detail::kHeaderSchemaVersion;

}  // namespace outbox::kafka
