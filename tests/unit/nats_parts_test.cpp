// The parts of the NATS sink that need no server: the partition hash (Kafka's murmur2, checked
// against the vectors of Kafka's own UtilsTest), subject templates and subject rules.

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "nats/nats_common.hpp"
#include "nats/nats_stream.hpp"
#include "outbox/error.hpp"
#include "outbox/nats_consumer.hpp"
#include "outbox/nats_sink.hpp"
#include "outbox/partition.hpp"

namespace outbox {
namespace {

TEST(Partition, Murmur2MatchesKafkasJavaClient) {
  // org.apache.kafka.common.utils.UtilsTest#testMurmur2
  EXPECT_EQ(kafka_murmur2("21"), -973932308);
  EXPECT_EQ(kafka_murmur2("foobar"), -790332482);
  EXPECT_EQ(kafka_murmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(kafka_murmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(kafka_murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(kafka_murmur2("abc"), 479470107);
}

TEST(Partition, AnAggregateAlwaysGetsTheSameOneWithinRange) {
  for (const char* id : {"order-1", "order-2", "", "a.b c*>"}) {
    const auto partition = aggregate_partition(id, 16);
    EXPECT_LT(partition, 16U);
    EXPECT_EQ(partition, aggregate_partition(id, 16));
  }
  // Kafka's toPositive(murmur2) % n: "foobar" is -790332482, & 0x7fffffff = 1357151166.
  EXPECT_EQ(aggregate_partition("foobar", 7), 1357151166U % 7U);
  EXPECT_EQ(aggregate_partition("anything", 1), 0U);
}

Event event_of(const std::string& type, const std::string& id) {
  Event event;
  event.aggregate_type = type;
  event.aggregate_id = id;
  event.event_type = "Placed";
  return event;
}

TEST(NatsSubject, RendersTypeEventTypeAndPartition) {
  NatsSinkOptions options;
  options.subject_template = "shop.{aggregate_type}.{event_type}.{partition}";
  options.partitions = 7;
  EXPECT_EQ(render_nats_subject(options, event_of("order", "foobar")),
            "shop.order.Placed." + std::to_string(1357151166U % 7U));
}

TEST(NatsSubject, TheSinkRefusesTemplatesItCouldNotPublishTo) {
  const auto refused = [](const std::string& subject_template, const std::string& says) {
    NatsSinkOptions options;
    options.servers = "nats://127.0.0.1:1";
    options.subject_template = subject_template;
    try {
      make_nats_sink(options);
      ADD_FAILURE() << subject_template << " accepted";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
    }
  };
  refused("outbox.{aggregate_id}", "{aggregate_id} is not allowed");
  refused("outbox.{tenant}", "unknown placeholder");
  refused("outbox..{aggregate_type}", "empty token");
  refused("outbox.*", "wildcard");
  refused("outbox.>", "wildcard");
  refused("outbox {aggregate_type}", "whitespace");
}

TEST(NatsSubject, SubjectProblemsAreNamed) {
  EXPECT_EQ(nats::subject_problem("outbox.order.3"), "");
  EXPECT_NE(nats::subject_problem(""), "");
  EXPECT_NE(nats::subject_problem("outbox.order."), "");
  EXPECT_NE(nats::subject_problem(".outbox"), "");
  EXPECT_NE(nats::subject_problem("outbox.a\tb"), "");
  EXPECT_NE(nats::subject_problem("outbox.a\nb"), "");
  EXPECT_EQ(nats::subject_filter("outbox.{aggregate_type}.{partition}"), "outbox.*.*");
  EXPECT_TRUE(nats::subject_covers("outbox.>", "outbox.*.*"));
  EXPECT_TRUE(nats::subject_covers("outbox.*.*", "outbox.*.*"));
  EXPECT_TRUE(nats::subject_covers(">", "a.b"));
  EXPECT_TRUE(nats::subject_covers("outbox.*.*", "outbox.order.*"));
  EXPECT_FALSE(nats::subject_covers("outbox.order.*", "outbox.*.*"));
  EXPECT_FALSE(nats::subject_covers("outbox.*", "outbox.*.*"));
  EXPECT_FALSE(nats::subject_covers("outbox.*.*", "outbox.>"));
  EXPECT_FALSE(nats::subject_covers("other.>", "outbox.*.*"));
}

TEST(NatsOptions, BadServersPartitionsAndTimeoutsAreRefused) {
  const auto refused = [](NatsSinkOptions options, const std::string& says) {
    try {
      make_nats_sink(options);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
      EXPECT_EQ(std::string(error.what()).find("s3cret"), std::string::npos) << "no password";
    }
  };
  NatsSinkOptions options;
  options.servers = "http://user:s3cret@127.0.0.1:4222";
  refused(options, "nats:// or tls://");
  options.servers = "nats://user:s3cret@127.0.0.1:4222,";
  refused(options, "is empty");
  options = NatsSinkOptions{};
  options.partitions = 0;
  refused(options, "partitions must be 1 to 4096");
  options = NatsSinkOptions{};
  options.ack_timeout = std::chrono::milliseconds(30000);
  options.max_ack_timeout = std::chrono::milliseconds(30000);
  refused(options, "before the claim's lease");
  options = NatsSinkOptions{};
  options.stream = "OUT.BOX";
  refused(options, "stream name");
}

// The sink's own counters follow the naming rules and are in the operations guide (the relay's
// lists are checked in stats_test.cpp). A sink needs no server to be built.
TEST(NatsOptions, EverySinkMetricIsDocumented) {
  std::ifstream file(std::string(OUTBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  const std::string guide((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  NatsSinkOptions options;
  options.servers = "nats://127.0.0.1:1";
  const auto sink = make_nats_sink(options);
  const auto samples = sink->stats();
  EXPECT_EQ(samples.size(), 4U);
  for (const StatSample& sample : samples) {
    const std::string metric(sample.def->metric);
    EXPECT_TRUE(metric.starts_with("outbox_relay_nats_") && metric.ends_with("_total")) << metric;
    EXPECT_NE(guide.find("| `" + metric + "` |"), std::string::npos) << metric;
  }
}

TEST(NatsOptions, EveryConsumerMetricIsDocumented) {
  std::ifstream file(std::string(OUTBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  const std::string guide((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const NatsConsumerStats stats;
  EXPECT_EQ(stats.pending_messages, -1) << "unknown until a message says";
  for (const StatSample& sample : stat_samples(stats)) {
    const std::string metric(sample.def->metric);
    EXPECT_EQ(metric.ends_with("_total"), sample.def->kind == StatKind::counter) << metric;
    EXPECT_NE(guide.find("| `" + metric + "` |"), std::string::npos) << metric;
  }
}

TEST(NatsHeaders, ServerAndOutboxNamesAreReserved) {
  EXPECT_TRUE(nats::is_reserved_nats_header("Nats-Msg-Id"));
  EXPECT_TRUE(nats::is_reserved_nats_header("NATS-EXPECTED-STREAM"));
  EXPECT_TRUE(nats::is_reserved_nats_header("event_id"));
  EXPECT_FALSE(nats::is_reserved_nats_header("traceparent"));
}

}  // namespace
}  // namespace outbox
