// The parts of the RabbitMQ sink that need no broker: URLs, routing-key templates (shared with the
// NATS sink), AMQP tables, and the sink's and consumer's metrics in the operations guide.

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "outbox/error.hpp"
#include "outbox/partition.hpp"
#include "outbox/rabbitmq_consumer.hpp"
#include "outbox/rabbitmq_sink.hpp"
#include "rabbitmq/amqp_common.hpp"
#include "sinks/key_template.hpp"

namespace outbox {
namespace {

std::string guide() {
  std::ifstream file(std::string(OUTBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

TEST(RabbitMqUrl, ATrailingSlashIsTheDefaultVhostAndEncodedPartsAreDecoded) {
  auto endpoint = rabbitmq::parse_url("amqp://u:p@broker:5673/");
  EXPECT_EQ(endpoint.host, "broker");
  EXPECT_EQ(endpoint.port, 5673);
  EXPECT_EQ(endpoint.user, "u");
  EXPECT_EQ(endpoint.password, "p");
  EXPECT_EQ(endpoint.vhost, "/");
  EXPECT_EQ(rabbitmq::parse_url("amqp://broker").vhost, "/");
  EXPECT_EQ(rabbitmq::parse_url("amqp://broker").port, 5672);
  endpoint = rabbitmq::parse_url("amqp://u:p%40ss@broker/prod");
  EXPECT_EQ(endpoint.password, "p@ss");
  EXPECT_EQ(endpoint.vhost, "prod");
  EXPECT_EQ(rabbitmq::parse_url("amqp://broker/%2fslashed").vhost, "/slashed");
  EXPECT_EQ(rabbitmq::describe(endpoint), "broker:5672/prod") << "never the password";
  EXPECT_THROW(rabbitmq::parse_url("amqps://broker/"), ConfigError);
  EXPECT_THROW(rabbitmq::parse_url("broker:5672"), ConfigError);
  EXPECT_THROW(rabbitmq::parse_url("amqp://bob@broker/"), ConfigError) << "not bob:guest";
  try {
    rabbitmq::parse_url("amqp://bob:s3cret@broker:notaport/");
    ADD_FAILURE() << "a port that is not a number was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()).find("s3cret"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("bob:***@broker"), std::string::npos) << error.what();
  }
  EXPECT_EQ(rabbitmq::parse_url("amqp://").host, "localhost") << "rabbitmq-c's default, as pika's";
  EXPECT_THROW(rabbitmq::parse_url("amqp://broker:notaport/"), ConfigError);
}

TEST(KeyTemplate, PlaceholdersRenderAndFilterAndTheAggregateIdIsRefused) {
  Event event;
  event.aggregate_type = "order";
  event.event_type = "Placed";
  event.aggregate_id = "order-42";
  EXPECT_EQ(detail::render_key("{aggregate_type}.{event_type}", event, 16), "order.Placed");
  const std::string key = detail::render_key("{aggregate_type}.{partition}", event, 16);
  EXPECT_EQ(key, "order." + std::to_string(aggregate_partition(event.aggregate_id, 16)));
  EXPECT_EQ(detail::key_filter("x.{aggregate_type}.{partition}", "*"), "x.*.*");
  EXPECT_THROW(detail::check_key_template("{aggregate_id}", "RabbitMQ routing key", "--p", "e"),
               ConfigError);
  EXPECT_THROW(detail::check_key_template("{tenant}.x", "RabbitMQ routing key", "--p", "e"),
               ConfigError);
  EXPECT_NO_THROW(detail::check_key_template("{aggregate_type}.{partition}", "k", "--p", "e"));
}

TEST(RabbitMqTable, TextsAreOwnedAndReadBack) {
  rabbitmq::Table table;
  {
    std::string value = "acme";
    table.add_text("tenant", value);
    value = "overwritten";
  }
  table.add_int64("aggregate_sequence", 9'000'000'000);
  table.add_bool("flag", true);
  const amqp_table_t view = table.get();
  EXPECT_EQ(view.num_entries, 3);
  EXPECT_EQ(rabbitmq::table_text(view, "tenant"), "acme");
  EXPECT_EQ(rabbitmq::table_text(view, "aggregate_sequence"), "9000000000");
  EXPECT_EQ(rabbitmq::table_text(view, "flag"), "true");
  EXPECT_EQ(rabbitmq::table_text(view, "missing"), "");
}

// The sink's own statistics and the consumer's are in the operations guide. A sink needs no
// broker to be built (it connects on the first send).
TEST(RabbitMqOptions, EverySinkAndConsumerMetricIsDocumented) {
  const std::string text = guide();
  const auto sink = make_rabbitmq_sink(RabbitMqSinkOptions{});
  const auto samples = sink->stats();
  EXPECT_EQ(samples.size(), 6U);
  for (const StatSample& sample : samples) {
    const std::string metric(sample.def->metric);
    EXPECT_TRUE(metric.starts_with("outbox_relay_rabbitmq_")) << metric;
    EXPECT_EQ(metric.ends_with("_total"), sample.def->kind == StatKind::counter) << metric;
    EXPECT_NE(text.find("| `" + metric + "` |"), std::string::npos) << metric;
  }
  for (const StatSample& sample : stat_samples(RabbitMqConsumerStats{})) {
    const std::string metric(sample.def->metric);
    EXPECT_EQ(metric.ends_with("_total"), sample.def->kind == StatKind::counter) << metric;
    EXPECT_NE(text.find("| `" + metric + "` |"), std::string::npos) << metric;
  }
}

}  // namespace
}  // namespace outbox
