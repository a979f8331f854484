#pragma once
// Which of N partitions an aggregate belongs to: the hash Kafka's Java client and librdkafka's
// murmur2 partitioner use (murmur2 of the key's bytes, the sign bit cleared, modulo N). The
// sinks that have no partitions of their own (a NATS subject, a RabbitMQ queue, a Redis stream
// per partition) use it, so an aggregate gets the same number on every destination, and a
// consumer in another language computes it with its Kafka client's partitioner.

#include <cstdint>
#include <string_view>

namespace outbox {

// Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit value.
[[nodiscard]] std::int32_t kafka_murmur2(std::string_view key) noexcept;

// (kafka_murmur2(aggregate_id) & 0x7fffffff) % partitions; `partitions` must be at least 1.
[[nodiscard]] std::uint32_t aggregate_partition(std::string_view aggregate_id,
                                                std::uint32_t partitions) noexcept;

}  // namespace outbox
