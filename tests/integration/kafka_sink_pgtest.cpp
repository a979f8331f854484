// The Kafka sink against the librdkafka mock cluster: where its messages land.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "outbox/kafka.hpp"
#include "outbox/log.hpp"
#include "support/kafka_reader.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

// Kafka's own murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as the Java producer's
// default partitioner and Kafka Connect use it: partition = (murmur2(key) & 0x7fffffff) % n.
std::int32_t java_murmur2(const std::string& key) {
  const auto* data = reinterpret_cast<const unsigned char*>(key.data());
  const auto length = static_cast<std::int32_t>(key.size());
  constexpr std::uint32_t kM = 0x5bd1e995;
  constexpr int kR = 24;
  std::uint32_t h = 0x9747b28c ^ static_cast<std::uint32_t>(length);
  const std::int32_t words = length / 4;
  for (std::int32_t i = 0; i < words; ++i) {
    const std::int32_t at = i * 4;
    std::uint32_t k = data[at] | (data[at + 1] << 8) | (data[at + 2] << 16) |
                      (static_cast<std::uint32_t>(data[at + 3]) << 24);
    k *= kM;
    k ^= k >> kR;
    k *= kM;
    h *= kM;
    h ^= k;
  }
  const std::int32_t tail = words * 4;
  switch (length % 4) {
    case 3:
      h ^= static_cast<std::uint32_t>(data[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<std::uint32_t>(data[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= data[tail];
      h *= kM;
  }
  h ^= h >> 13;
  h *= kM;
  h ^= h >> 15;
  return static_cast<std::int32_t>(h);
}

// An aggregate's events land where a Java producer or Kafka Connect would put the same key, so
// consumers that join the topic with other producers see one partition per aggregate.
TEST(KafkaSinkPartitions, AKeyLandsWhereJavasDefaultPartitionerPutsIt) {
  constexpr int kPartitions = 12;
  const std::string topic = "sink.partitions.murmur2";
  kafka().create_topic(topic, kPartitions);
  auto sink = make_kafka_sink(KafkaSinkOptions{kafka().bootstrap_servers(), topic, {}});
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) {
    Event event;
    event.event_id = EventId::generate();
    event.aggregate_type = "order";
    event.aggregate_id = "order-" + std::to_string(i * 7919);
    event.aggregate_sequence = 1;
    event.event_type = "Placed";
    event.payload = "{}";
    event.headers = "{}";
    keys.push_back(event.aggregate_id);
    sink->send(event, static_cast<std::uint64_t>(i));
  }
  std::vector<DeliveryReport> reports;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (reports.size() < keys.size() && std::chrono::steady_clock::now() < deadline) {
    sink->poll(100ms, reports);
  }
  ASSERT_EQ(reports.size(), keys.size());
  int spread[kPartitions] = {};
  for (const DeliveryReport& report : reports) {
    ASSERT_EQ(report.outcome, DeliveryOutcome::published) << report.error;
    const std::string& key = keys.at(report.ticket);
    EXPECT_EQ(report.partition, (java_murmur2(key) & 0x7fffffff) % kPartitions) << key;
    ++spread[report.partition];
  }
  for (int p = 0; p < kPartitions; ++p) EXPECT_GT(spread[p], 0) << "partition " << p;
}

// One of the sink's own statistics by key; -1 (and a failure) when it has no such statistic.
std::int64_t stat_value(const Sink& sink, std::string_view key) {
  for (const StatSample& sample : sink.stats()) {
    if (sample.def->key == key) return sample.value;
  }
  ADD_FAILURE() << key << " is not among the Kafka sink's statistics";
  return -1;
}

bool readable(int fd, std::chrono::milliseconds wait) {
  pollfd ready{fd, POLLIN, 0};
  return ::poll(&ready, 1, static_cast<int>(wait.count())) == 1 && (ready.revents & POLLIN) != 0;
}

Event wake_event(const std::string& aggregate_type) {
  Event event;
  event.event_id = EventId::generate();
  event.aggregate_type = aggregate_type;
  event.aggregate_id = "order-1";
  event.aggregate_sequence = 1;
  event.event_type = "Placed";
  event.payload = "{}";
  event.headers = "{}";
  return event;
}

// The relay waits on the sink's descriptor beside its change stream (Sink::wake_fd): it must turn
// readable when a delivery report is ready, without poll() being called, and poll() must clear it,
// or the relay would sleep through reports or spin. A send refused at once (a topic Kafka would
// refuse) has its report ready outside any poll(): that too makes it readable.
TEST(KafkaSinkWake, ItsDescriptorIsReadableWhileAReportWaitsAndPollClearsIt) {
  const std::string topic = "sink.wake";
  kafka().create_topic(topic, 1);
  auto sink =
      make_kafka_sink(KafkaSinkOptions{kafka().bootstrap_servers(), "sink.{aggregate_type}", {}});
  const int fd = sink->wake_fd();
  ASSERT_GE(fd, 0);
  std::vector<DeliveryReport> reports;
  sink->poll(0ms, reports);  // a new producer's descriptor starts readable (enable_wake)
  ASSERT_TRUE(reports.empty());
  EXPECT_FALSE(readable(fd, 0ms));
  for (std::uint64_t ticket = 1; ticket <= 3; ++ticket) {
    sink->send(wake_event("wake"), ticket);
    ASSERT_TRUE(readable(fd, 30s)) << "ticket " << ticket << ": acknowledged, never readable";
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (reports.size() < ticket && std::chrono::steady_clock::now() < deadline) {
      sink->poll(0ms, reports);
      if (reports.size() < ticket) {
        ASSERT_TRUE(readable(fd, 30s)) << "ticket " << ticket;
      }
    }
    ASSERT_EQ(reports.size(), ticket);
    EXPECT_EQ(reports.back().outcome, DeliveryOutcome::published) << reports.back().error;
    EXPECT_FALSE(readable(fd, 0ms)) << "ticket " << ticket << ": poll() left it readable";
  }
  sink->send(wake_event("no spaces allowed"), 4);
  ASSERT_TRUE(readable(fd, 0ms)) << "a send refused at once left it unreadable";
  sink->poll(0ms, reports);
  ASSERT_EQ(reports.size(), 4U);
  EXPECT_EQ(reports.back().outcome, DeliveryOutcome::permanent_failure);
  EXPECT_FALSE(readable(fd, 0ms));
}

// A fatal error of the idempotent producer makes the sink start a new one (check_fatal): the new
// producer's reports must wake the relay as the old one's did. The gap-less guarantee turns a
// permanent produce error (a message too large, as the mock answers) into a fatal error.
TEST(KafkaSinkWake, ARecreatedProducersReportsMakeItReadableToo) {
  const std::string topic = "sink.wake.fatal";
  kafka().create_topic(topic, 1);
  KafkaSinkOptions options{kafka().bootstrap_servers(), topic, {}};
  options.properties["enable.gapless.guarantee"] = "true";
  auto sink = make_kafka_sink(options);
  const int fd = sink->wake_fd();
  ASSERT_GE(fd, 0);
  kafka().fail_next_produce_requests(1, /*MESSAGE_TOO_LARGE=*/10);
  sink->send(wake_event("wake"), 1);
  std::vector<DeliveryReport> reports;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (reports.empty() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(readable(fd, 30s)) << "the fatal error never made it readable";
    sink->poll(0ms, reports);
  }
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_NE(reports[0].outcome, DeliveryOutcome::published);
  ASSERT_EQ(stat_value(*sink, "kafka_producers_recreated"), 1)
      << "no fatal error: this test needs one";
  sink->poll(0ms, reports);  // clears what the recreation signalled
  ASSERT_FALSE(readable(fd, 0ms));
  sink->send(wake_event("wake"), 2);
  ASSERT_TRUE(readable(fd, 30s)) << "the new producer's report never made it readable";
  const auto published_by = std::chrono::steady_clock::now() + 30s;
  while (reports.size() < 2 && std::chrono::steady_clock::now() < published_by) {
    sink->poll(100ms, reports);
  }
  ASSERT_EQ(reports.size(), 2U);
  EXPECT_EQ(reports[1].outcome, DeliveryOutcome::published) << reports[1].error;
}

// With a CloudEvents source the sink writes the Kafka binding's binary-mode headers; an event's own
// header may not stand in for one of them. Without one it writes none.
TEST(KafkaSinkCloudEvents, TheBindingsHeadersWhenAskedAndNoneOtherwise) {
  const std::string topic = "sink.cloudevents";
  kafka().create_topic(topic, 1);
  for (const std::string source : {"/orders", ""}) {
    KafkaSinkOptions options{kafka().bootstrap_servers(), topic, {}};
    options.cloudevents_source = source;
    auto sink = make_kafka_sink(options);
    Event event;
    event.event_id = EventId::generate();
    event.aggregate_type = "order";
    event.aggregate_id = "o-é 1";
    event.aggregate_sequence = 12;
    event.event_type = "Placed";
    event.schema_version = 3;
    event.payload = R"({"total":1})";
    event.headers = R"({"ce_id":"forged","Content-Type":"application/cloudevents+json",)"
                    R"("CE_Source":"forged","tenant":"t1"})";
    event.occurred_at = "2026-12-03 07:40:00.25+00";
    sink->send(event, 1);
    std::vector<DeliveryReport> reports;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (reports.empty() && std::chrono::steady_clock::now() < deadline)
      sink->poll(100ms, reports);
    ASSERT_EQ(reports.size(), 1U);
    ASSERT_EQ(reports[0].outcome, DeliveryOutcome::published) << reports[0].error;
    const auto messages = read_topic_until(
        kafka().bootstrap_servers(), topic,
        [&](const std::vector<ReadMessage>& so_far) {
          return std::any_of(so_far.begin(), so_far.end(), [&](const ReadMessage& m) {
            return m.headers.at("event_id") == event.event_id.to_string();
          });
        },
        20s);
    const auto found = std::find_if(messages.begin(), messages.end(), [&](const ReadMessage& m) {
      return m.headers.at("event_id") == event.event_id.to_string();
    });
    ASSERT_NE(found, messages.end());
    const auto& headers = found->headers;
    EXPECT_EQ(headers.at("tenant"), "t1");
    if (source.empty()) {
      EXPECT_FALSE(headers.contains("ce_specversion"));
      EXPECT_FALSE(headers.contains("content-type"));
      EXPECT_EQ(headers.at("ce_id"), "forged") << "without the binding, the event's own header";
      continue;
    }
    EXPECT_EQ(headers.at("ce_specversion"), "1.0");
    EXPECT_EQ(headers.at("ce_id"), event.event_id.to_string()) << "not the event's own ce_id";
    EXPECT_EQ(headers.at("ce_source"), "/orders");
    EXPECT_EQ(headers.at("ce_type"), "Placed");
    EXPECT_EQ(headers.at("ce_subject"), "o-é 1");
    EXPECT_EQ(headers.at("ce_time"), "2026-12-03T07:40:00.250000Z");
    EXPECT_EQ(headers.at("ce_aggregatetype"), "order");
    EXPECT_EQ(headers.at("ce_aggregatesequence"), "12");
    EXPECT_EQ(headers.at("ce_schemaversion"), "3");
    EXPECT_EQ(headers.at("content-type"), "application/json");
    EXPECT_FALSE(headers.contains("Content-Type")) << "a producer's header in another case";
    EXPECT_FALSE(headers.contains("CE_Source"));
    EXPECT_FALSE(headers.contains("ce_partitionkey")) << "the key is the partition key";
    EXPECT_EQ(found->key, "o-é 1");
  }
}

// The sink's own statistics (Sink::stats()): a send that finds the client's queue full waits for
// room, is published all the same, and is counted under its Prometheus name.
TEST(KafkaSinkStats, AFullQueueIsWaitedOnCountedAndStillPublished) {
  const std::string topic = "sink.stats.queue_full";
  kafka().create_topic(topic, 1);
  KafkaSinkOptions options{kafka().bootstrap_servers(), topic, {}};
  options.properties["queue.buffering.max.messages"] = "1";
  auto sink = make_kafka_sink(options);
  const auto value_of = [&](std::string_view key) { return stat_value(*sink, key); };
  EXPECT_EQ(value_of("kafka_queue_full_waits"), 0);
  constexpr int kEvents = 20;
  for (int i = 0; i < kEvents; ++i) {
    Event event;
    event.event_id = EventId::generate();
    event.aggregate_type = "order";
    event.aggregate_id = "order-" + std::to_string(i);
    event.aggregate_sequence = 1;
    event.event_type = "Placed";
    event.payload = "{}";
    event.headers = "{}";
    sink->send(event, static_cast<std::uint64_t>(i));
  }
  std::vector<DeliveryReport> reports;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (reports.size() < kEvents && std::chrono::steady_clock::now() < deadline) {
    sink->poll(100ms, reports);
  }
  ASSERT_EQ(reports.size(), static_cast<std::size_t>(kEvents));
  for (const DeliveryReport& report : reports) {
    EXPECT_EQ(report.outcome, DeliveryOutcome::published) << report.error;
  }
  EXPECT_GT(value_of("kafka_queue_full_waits"), 0);
  EXPECT_EQ(value_of("kafka_acks_without_offset"), 0);
  EXPECT_EQ(value_of("kafka_producers_recreated"), 0);
  std::ifstream file(std::string(OUTBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  const std::string guide((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (const StatSample& sample : sink->stats()) {
    const std::string metric(sample.def->metric);
    EXPECT_EQ(metric.substr(0, 19), "outbox_relay_kafka_") << sample.def->key;
    EXPECT_NE(guide.find("| `" + metric + "` |"), std::string::npos)
        << metric << " is not in docs/OPERATIONS.md's metric tables";
  }
}

// The reference above is Kafka's: its own test vectors (Utils.murmur2 in Kafka's UtilsTest).
// A loopback port nothing listens on: bound, then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    ADD_FAILURE() << "cannot bind a loopback socket";
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// librdkafka's own lines (here: the broker refuses the connection) reach the library's logger,
// in its format, instead of stderr as plain text: a JSON log pipeline sees them as JSON.
TEST(KafkaSinkLogs, LibrdkafkasLinesGoThroughTheOutboxLogger) {
  spdlog::logger& logger = detail::log();
  const auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(200);
  logger.sinks().push_back(ring);
  set_log_format(LogFormat::json);
  std::vector<std::string> lines;
  {
    KafkaSinkOptions options;
    options.brokers = "127.0.0.1:" + std::to_string(closed_port());
    options.topic_template = "t";
    const std::unique_ptr<Sink> sink = make_kafka_sink(options);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    const auto refused = [&] {
      return std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
        return line.find("\"msg\":\"kafka ") != std::string::npos &&
               line.find("Connection refused") != std::string::npos;
      });
    };
    while (!refused() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      lines = ring->last_formatted();
    }
  }
  set_log_format(LogFormat::text);
  logger.sinks().pop_back();
  const auto line = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("Connection refused") != std::string::npos;
  });
  ASSERT_NE(line, lines.end()) << "no librdkafka line about the refused connection in "
                               << lines.size() << " lines";
  const nlohmann::json record = nlohmann::json::parse(*line);  // throws when not JSON
  EXPECT_EQ(record.at("level"), "error") << *line;
  EXPECT_EQ(record.at("logger"), "outbox") << *line;
  EXPECT_EQ(record.at("msg").get<std::string>().rfind("kafka ", 0), 0U) << *line;
  EXPECT_TRUE(record.contains("ts")) << *line;
}

TEST(KafkaSinkPartitions, TheReferenceMurmur2MatchesKafkasTestVectors) {
  EXPECT_EQ(java_murmur2("21"), -973932308);
  EXPECT_EQ(java_murmur2("foobar"), -790332482);
  EXPECT_EQ(java_murmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(java_murmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(java_murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(java_murmur2(std::string{'a', 'b', 'c'}), 479470107);
}

}  // namespace
}  // namespace outbox::testing
