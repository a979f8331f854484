#pragma once
// `outbox relay --sink redis`: the Redis Streams sink's flags (and config keys of the same names),
// and the RedisSinkOptions they make.

#include <chrono>
#include <string>

#include "outbox/redis_sink.hpp"

namespace CLI {
class App;
}

namespace outbox::cli {

struct RedisFlags {
  std::string url = RedisSinkOptions{}.url;
  std::string stream_template = RedisSinkOptions{}.stream_template;
  std::uint32_t partitions = RedisSinkOptions{}.partitions;
  std::string dedup_window;  // empty: the relay's longest retry, at least 2 minutes
  std::string reply_timeout = "5s";
  std::string retention = "0";
  bool allow_volatile_acks = false;

  bool operator==(const RedisFlags&) const = default;
};

void add_redis_options(CLI::App* command, RedisFlags& flags);

// `lease`, `backoff_max`: the relay's; the reply timeout must end before the lease, and the dedup
// window cover the longest retry.
RedisSinkOptions redis_sink_options(const RedisFlags& flags, std::chrono::milliseconds lease,
                                    std::chrono::milliseconds backoff_max);

// Whether any --redis-* flag was given (they are refused with another sink).
inline bool any_redis_flag(const RedisFlags& flags) { return !(flags == RedisFlags{}); }

}  // namespace outbox::cli
