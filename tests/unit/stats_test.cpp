// One definition per statistic (outbox/stats.hpp): each list entry reaches Prometheus, JSON and
// the text line with no code of its own, under a name the operations guide documents.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include "common/stat_list.hpp"
#include "observe/metric_families.hpp"
#include "outbox/kafka_consumer.hpp"
#include "outbox/relay.hpp"
#include "outbox/relay_stats_format.hpp"  // apps/outbox
#include "unit/contains.hpp"

namespace outbox {
namespace {

// A value per kind that cannot be mistaken for a default: 7, 8, 9, ... (flags: true).
struct Distinct {
  std::int64_t next = 7;
  template <typename T>
  void operator()(T& field) {
    if constexpr (std::is_same_v<T, bool>) {
      field = true;
    } else {
      field = static_cast<T>(next++);
    }
  }
};

#define OUTBOX_TEST_SET(field, ...) distinct(stats.field);

RelayStats every_relay_stat_set() {
  RelayStats stats;
  Distinct distinct;
  OUTBOX_RELAY_STATS(OUTBOX_TEST_SET)
  return stats;
}

KafkaConsumerStats every_consumer_stat_set() {
  KafkaConsumerStats stats;
  Distinct distinct;
  OUTBOX_KAFKA_CONSUMER_STATS(OUTBOX_TEST_SET)
  return stats;
}

// A sink's own list, as a sink defines it.
#define TEST_SINK_STATS(X)                                                                        \
  X(test_sends_refused, counter, when_set, "outbox_relay_test_sends_refused_total", "{} refused", \
    "Sends the test sink refused.")
struct TestSinkCounters {
  TEST_SINK_STATS(OUTBOX_ATOMIC_STAT_FIELD)
};

std::string prometheus_text(const RelayStats& stats) {
  RelayMetrics metrics;
  metrics.stats = stats;
  metrics.by_aggregate_type = {{"order", {}}};
  observe::Families families;
  observe::add_relay(families, metrics, "");
  return observe::serialize(families);
}

std::string sample_line(const StatSample& sample) {
  std::ostringstream value;
  value << static_cast<double>(sample.value) * sample.def->scale;
  return std::string(sample.def->metric) + " " + value.str() + "\n";
}

TEST(StatLists, EveryRelayStatReachesPrometheusJsonAndTheTextLine) {
  const RelayStats stats = every_relay_stat_set();
  const std::string text = prometheus_text(stats);
  const nlohmann::json json = cli::relay_stats_json("r1", stats);
  const std::string line = cli::relay_stats_text("r1", stats);
  for (const StatSample& sample : stat_samples(stats)) {
    const StatDef& def = *sample.def;
    ASSERT_GT(sample.value, 0) << def.key << " was not set by the list";
    if (!def.metric.empty()) {
      EXPECT_TRUE(contains(text, "# HELP " + std::string(def.metric) + " " + std::string(def.help)))
          << def.key;
      EXPECT_TRUE(contains(text, sample_line(sample))) << def.key << " in\n" << text;
    }
    ASSERT_TRUE(json.contains(def.key)) << def.key;
    if (def.kind == StatKind::flag) {
      EXPECT_EQ(json[std::string(def.key)], true) << def.key;
    } else {
      EXPECT_EQ(json[std::string(def.key)], sample.value) << def.key;
    }
    if (def.show != StatShow::never) {
      EXPECT_TRUE(contains(line, fmt::format(fmt::runtime(def.text), sample.value)))
          << def.key << " in " << line;
    }
  }
  EXPECT_TRUE(contains(text, "outbox_relay_slot_lag_seconds 0.")) << "slot_lag_ms in seconds";
}

TEST(StatLists, UnknownGaugesAreAbsentFromPrometheusAndNullInJson) {
  const RelayStats stats;  // a polling relay: every slot gauge unknown (-1)
  const std::string text = prometheus_text(stats);
  EXPECT_FALSE(contains(text, "outbox_relay_slot_lag_bytes "));
  EXPECT_FALSE(contains(text, "outbox_relay_slot_retained_bytes "));
  EXPECT_TRUE(contains(text, "outbox_relay_slot_standby 0\n"));
  const nlohmann::json json = cli::relay_stats_json("r1", stats);
  EXPECT_TRUE(json["slot_lag_ms"].is_null());
  EXPECT_EQ(json["slot_standby"], false);
  EXPECT_EQ(json["published"], 0);
  const std::string line = cli::relay_stats_text("r1", stats);
  EXPECT_TRUE(contains(line, "published 0")) << line;
  EXPECT_FALSE(contains(line, "slot")) << line;
}

// Adding a sink's statistic is its list entry: the relay's metrics, JSON and line carry it.
TEST(StatLists, ASinksOwnListReachesTheRelaysOutputs) {
  TestSinkCounters counters;
  counters.test_sends_refused.store(3);
  RelayStats stats;
  stats.sink = OUTBOX_STAT_SAMPLES(TEST_SINK_STATS, counters, detail::kRelaxed);
  EXPECT_TRUE(contains(prometheus_text(stats), "outbox_relay_test_sends_refused_total 3\n"));
  EXPECT_EQ(cli::relay_stats_json("r1", stats)["test_sends_refused"], 3);
  EXPECT_TRUE(contains(cli::relay_stats_text("r1", stats), ", 3 refused"));
}

TEST(StatLists, EveryConsumerStatReachesPrometheus) {
  const KafkaConsumerStats stats = every_consumer_stat_set();
  observe::Families families;
  observe::add_consumer(families, "c", stat_samples(stats), stats.health);
  const std::string text = observe::serialize(families);
  for (const StatSample& sample : stat_samples(stats)) {
    std::string name(sample.def->metric);
    EXPECT_TRUE(contains(text, name + "{consumer=\"c\"} " + std::to_string(sample.value) + "\n"))
        << name << " in\n"
        << text;
  }
  KafkaConsumerStats fresh;
  EXPECT_EQ(fresh.lag_messages, -1) << "unknown until measured";
  observe::Families again;
  observe::add_consumer(again, "c", stat_samples(fresh), fresh.health);
  EXPECT_TRUE(
      contains(observe::serialize(again), "outbox_consumer_lag_messages{consumer=\"c\"} -1"));
}

// Every list's names: unique, a counter ends in _total and nothing else does, and each is in the
// operations guide's metric tables.
TEST(StatLists, EveryMetricIsNamedOnceByConventionAndDocumented) {
  std::ifstream file(std::string(OUTBOX_SOURCE_DIR) + "/docs/OPERATIONS.md");
  ASSERT_TRUE(file) << "docs/OPERATIONS.md";
  const std::string guide((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<StatSample> all = stat_samples(every_relay_stat_set());
  for (const auto& s : stat_samples(AggregateTypeCounts{})) all.push_back(s);
  for (const auto& s : stat_samples(every_consumer_stat_set())) all.push_back(s);
  // The Kafka sink's list: KafkaSinkStats in tests/integration/kafka_sink_pgtest.cpp.
  std::set<std::string_view> names;
  for (const StatSample& sample : all) {
    const StatDef& def = *sample.def;
    EXPECT_FALSE(def.help.empty()) << def.key;
    if (def.metric.empty()) continue;
    EXPECT_TRUE(names.insert(def.metric).second) << def.metric << " defined twice";
    const bool total = def.metric.ends_with("_total");
    EXPECT_EQ(total, def.kind == StatKind::counter) << def.metric;
    EXPECT_TRUE(contains(guide, "| `" + std::string(def.metric) + "` |"))
        << def.metric << " is not in docs/OPERATIONS.md's metric tables";
  }
}

}  // namespace
}  // namespace outbox
