#include "outbox/partition.hpp"

namespace outbox {

std::int32_t kafka_murmur2(std::string_view key) noexcept {
  constexpr std::uint32_t kSeed = 0x9747b28c;
  constexpr std::uint32_t kM = 0x5bd1e995;
  constexpr int kR = 24;
  const auto* data = reinterpret_cast<const unsigned char*>(key.data());
  const auto length = static_cast<std::uint32_t>(key.size());
  std::uint32_t h = kSeed ^ length;
  const std::uint32_t whole = length / 4;
  for (std::uint32_t i = 0; i < whole; ++i) {
    const std::uint32_t at = i * 4;
    std::uint32_t k = static_cast<std::uint32_t>(data[at]) |
                      (static_cast<std::uint32_t>(data[at + 1]) << 8) |
                      (static_cast<std::uint32_t>(data[at + 2]) << 16) |
                      (static_cast<std::uint32_t>(data[at + 3]) << 24);
    k *= kM;
    k ^= k >> kR;
    k *= kM;
    h *= kM;
    h ^= k;
  }
  const std::uint32_t tail = length & ~3U;
  switch (length % 4) {
    case 3:
      h ^= static_cast<std::uint32_t>(data[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<std::uint32_t>(data[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= static_cast<std::uint32_t>(data[tail]);
      h *= kM;
      break;
    default:
      break;
  }
  h ^= h >> 13;
  h *= kM;
  h ^= h >> 15;
  return static_cast<std::int32_t>(h);
}

std::uint32_t aggregate_partition(std::string_view aggregate_id,
                                  std::uint32_t partitions) noexcept {
  if (partitions == 0) return 0;
  return (static_cast<std::uint32_t>(kafka_murmur2(aggregate_id)) & 0x7fffffffU) % partitions;
}

}  // namespace outbox
