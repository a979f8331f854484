// The parts of the Redis Streams sink that need no server: URLs, stream names per partition, and
// the sink's and consumer's metrics in the operations guide.

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "outbox/error.hpp"
#include "outbox/partition.hpp"
#include "outbox/redis_consumer.hpp"
#include "outbox/redis_sink.hpp"
#include "redis/redis_common.hpp"

namespace outbox {
namespace {

std::string guide() {
  std::ifstream file(std::string(OUTBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

TEST(RedisUrl, HostPortDatabaseAndCredentialsAreReadAndThePasswordNeverShown) {
  auto endpoint = redis::parse_url("redis://cache:6380/2");
  EXPECT_EQ(endpoint.host, "cache");
  EXPECT_EQ(endpoint.port, 6380);
  EXPECT_EQ(endpoint.db, 2);
  EXPECT_EQ(endpoint.password, "");
  EXPECT_EQ(redis::parse_url("redis://cache").port, 6379);
  EXPECT_EQ(redis::parse_url("redis://cache/").db, 0);
  endpoint = redis::parse_url("redis://:p%40ss@cache");
  EXPECT_EQ(endpoint.user, "");
  EXPECT_EQ(endpoint.password, "p@ss");
  endpoint = redis::parse_url("redis://alice:s3cret@cache:6379/1");
  EXPECT_EQ(endpoint.user, "alice");
  EXPECT_EQ(endpoint.password, "s3cret");
  EXPECT_EQ(redis::describe(endpoint), "cache:6379/1") << "never the password";
  EXPECT_THROW(redis::parse_url("rediss://cache"), ConfigError);
  EXPECT_THROW(redis::parse_url("cache:6379"), ConfigError);
  EXPECT_THROW(redis::parse_url("redis://alice@cache"), ConfigError) << "a user without password";
  EXPECT_THROW(redis::parse_url("redis://cache/x"), ConfigError);
  EXPECT_THROW(redis::parse_url("redis://cache:0"), ConfigError);
  EXPECT_THROW(redis::parse_url("redis://:%4@cache"), ConfigError);
  try {
    redis::parse_url("redis://alice:s3cret@cache:notaport/");
    ADD_FAILURE() << "a port that is not a number was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()).find("s3cret"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("alice:***@cache"), std::string::npos) << error.what();
  }
  try {
    redis::parse_url("redis://s3cretonly@cache:6379");  // a bare password, as some clients write
    ADD_FAILURE() << "a user without a password was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()).find("s3cretonly"), std::string::npos) << error.what();
  }
}

TEST(RedisStreams, OnePerPartitionNamedAsTheSinkNamesThem) {
  const auto streams = redis_streams("outbox:{aggregate_type}:{partition}", "order", 3);
  ASSERT_EQ(streams,
            (std::vector<std::string>{"outbox:order:0", "outbox:order:1", "outbox:order:2"}));
  RedisSinkOptions options;
  options.partitions = 3;
  Event event;
  event.aggregate_type = "order";
  event.aggregate_id = "order-42";
  EXPECT_EQ(render_redis_stream(options, event),
            streams[aggregate_partition(event.aggregate_id, 3)]);
  EXPECT_EQ(redis_streams("outbox:{aggregate_type}", "order", 16),
            (std::vector<std::string>{"outbox:order"}))
      << "no {partition}: one stream";
  EXPECT_EQ(redis::parse_entry_id("1700000000000-7"),
            (std::optional<std::pair<std::uint64_t, std::uint64_t>>{{1700000000000ULL, 7ULL}}));
  EXPECT_FALSE(redis::parse_entry_id("17-x"));
}

// The sink's own statistics and the consumer's are in the operations guide. A sink needs no
// server to be built (it connects on the first send).
TEST(RedisOptions, EverySinkAndConsumerMetricIsDocumented) {
  const std::string text = guide();
  const auto sink = make_redis_sink(RedisSinkOptions{});
  const auto samples = sink->stats();
  EXPECT_EQ(samples.size(), 7U);
  for (const StatSample& sample : samples) {
    const std::string metric(sample.def->metric);
    EXPECT_TRUE(metric.starts_with("outbox_relay_redis_")) << metric;
    EXPECT_EQ(metric.ends_with("_total"), sample.def->kind == StatKind::counter) << metric;
    EXPECT_NE(text.find("| `" + metric + "` |"), std::string::npos) << metric;
  }
  for (const StatSample& sample : stat_samples(RedisConsumerStats{})) {
    const std::string metric(sample.def->metric);
    EXPECT_EQ(metric.ends_with("_total"), sample.def->kind == StatKind::counter) << metric;
    EXPECT_NE(text.find("| `" + metric + "` |"), std::string::npos) << metric;
  }
}

}  // namespace
}  // namespace outbox
