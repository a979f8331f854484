// The pure parts of what the relay measures and serves: timestamps read for commit-to-ack, the
// histogram, counts by aggregate type and their cap, listen addresses, and the text format.

#include "outbox/observe.hpp"

#include <gtest/gtest.h>

#include "common/histogram.hpp"
#include "common/timestamp.hpp"
#include "observe/metric_families.hpp"
#include "outbox/error.hpp"
#include "relay/relay_counters.hpp"
#include "unit/contains.hpp"

namespace outbox {
namespace {

using std::chrono::system_clock;

std::int64_t micros(system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

TEST(ParseTimestamptz, ReadsPostgresIsoOutputWithEveryOffsetForm) {
  // 2026-12-01 18:07:01 UTC = 1796148421 s since the epoch.
  const std::int64_t base = 1796148421LL * 1000000;
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01 18:07:01+00")), base);
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01 18:07:01.5+00")), base + 500000);
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01 18:07:01.123456+00")), base + 123456);
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01 19:37:01+01:30")), base);
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01 13:07:01-05")), base);
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01T18:07:01.000001+00:00")), base + 1);
  EXPECT_EQ(micros(*detail::parse_timestamptz("2026-12-01T18:07:01Z")), base);
}

TEST(ParseTimestamptz, AnythingElseIsNoValueNotAGuess) {
  for (const char* text :
       {"", "2026-12-01", "2026-12-01 18:07:01", "12/01/2026 18:07:01 UTC",
        "Tue Dec 01 18:07:01 2026 UTC", "2026-13-01 18:07:01+00", "2026-02-30 18:07:01+00",
        "2026-12-01 18:07:01.+00", "2026-12-01 18:07:01+00 trailing", "infinity"}) {
    EXPECT_FALSE(detail::parse_timestamptz(text).has_value()) << text;
  }
}

// A quick query runs every refresh; a slow one waits ten times its duration, so a large backlog
// cannot keep a backend busy.
TEST(BacklogRefresh, WaitsTenTimesAsLongAsASlowQueryTook) {
  using namespace std::chrono_literals;
  EXPECT_EQ(observe::next_backlog_query(5000ms, 20ms), 5000ms);
  EXPECT_EQ(observe::next_backlog_query(5000ms, 500ms), 5000ms);
  EXPECT_EQ(observe::next_backlog_query(5000ms, 2400ms), 24000ms);
  EXPECT_EQ(observe::next_backlog_query(5000ms, 10s), 60s);  // never longer for its duration
  EXPECT_EQ(observe::next_backlog_query(100ms, 30s), 60s);   // a statement timeout
  EXPECT_EQ(observe::next_backlog_query(std::chrono::minutes(5), 30s), std::chrono::minutes(5));
}

// Asking for a refresh does not undo the stretch: a run that took 2.4 s allows the next one no
// sooner than 24 s after it, however often someone asks.
TEST(BacklogRefresh, AnAskedRefreshWaitsOutTheStretch) {
  using namespace std::chrono_literals;
  EXPECT_EQ(observe::earliest_asked_backlog_query(20ms), 200ms);
  EXPECT_EQ(observe::earliest_asked_backlog_query(2400ms), 24000ms);
  EXPECT_EQ(observe::earliest_asked_backlog_query(30s), 60s);
}

TEST(Histogram, CountsEachObservationInItsBucketAndSums) {
  detail::Histogram h{1, 10};
  h.observe(0.5);
  h.observe(1);  // on the bound: in it (le)
  h.observe(5);
  h.observe(50);
  const HistogramSnapshot s = h.snapshot();
  EXPECT_EQ(s.upper_bounds, (std::vector<double>{1, 10}));
  EXPECT_EQ(s.counts, (std::vector<std::uint64_t>{2, 1, 1}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 56.5);
}

TEST(TypedCounts, PastTheCapEveryNewTypeSharesOneOtherEntry) {
  detail::TypedCounts counts;
  for (std::size_t i = 0; i < kMaxAggregateTypeLabels + 50; ++i) {
    const auto index = counts.index("type-" + std::to_string(i));
    counts.add(index, detail::TypedCounts::published);
  }
  counts.add(counts.index("type-0"), detail::TypedCounts::fenced, 2);
  const auto snapshot = counts.snapshot();
  ASSERT_EQ(snapshot.size(), kMaxAggregateTypeLabels + 1);
  EXPECT_EQ(snapshot.front().first, "type-0");
  EXPECT_EQ(snapshot.front().second.published, 1u);
  EXPECT_EQ(snapshot.front().second.fenced, 2u);
  EXPECT_EQ(snapshot.back().first, kOtherAggregateTypes);
  EXPECT_EQ(snapshot.back().second.published, 50u);
}

TEST(TypedCounts, ATypeNamedLikeTheSharedEntryIsThatEntry) {
  detail::TypedCounts counts;
  const auto named = counts.index(kOtherAggregateTypes);
  for (std::size_t i = 0; i < kMaxAggregateTypeLabels + 5; ++i) {
    counts.index("type-" + std::to_string(i));
  }
  EXPECT_EQ(counts.index("type-beyond"), named);
  std::size_t shared = 0;
  for (const auto& [name, c] : counts.snapshot()) shared += name == kOtherAggregateTypes;
  EXPECT_EQ(shared, 1u) << "two series would share one name and labels";
}

TEST(MetricFamilies, DistinctTypesStayDistinctLabels) {
  RelayMetrics m;
  m.by_aggregate_type = {{"a\x1b", {1, 0, 0, 0, 0}}, {"a\\x1b", {2, 0, 0, 0, 0}}};
  observe::Families families;
  observe::add_relay(families, m, "");
  const std::string text = observe::serialize(families);
  const auto first = text.find("outbox_relay_events_published_total{");
  const auto line_end = text.find('\n', first);
  const auto second = text.find("outbox_relay_events_published_total{", line_end);
  ASSERT_NE(second, std::string::npos);
  EXPECT_NE(text.substr(first, line_end - first - 2),
            text.substr(second, text.find('\n', second) - second - 2));
}

TEST(ListenAddress, ParsesHostAndPortAndTellsLoopback) {
  const ListenAddress v4 = parse_listen_address("127.0.0.1:9464", "--metrics-listen");
  EXPECT_EQ(v4.host, "127.0.0.1");
  EXPECT_EQ(v4.port, 9464);
  EXPECT_TRUE(v4.loopback());
  EXPECT_TRUE(parse_listen_address("127.1.2.3:0", "x").loopback());
  EXPECT_TRUE(parse_listen_address("[::1]:80", "x").loopback());
  EXPECT_TRUE(parse_listen_address("localhost:80", "x").loopback());
  EXPECT_FALSE(parse_listen_address("0.0.0.0:80", "x").loopback());
  EXPECT_FALSE(parse_listen_address("10.0.0.1:80", "x").loopback());
  EXPECT_FALSE(parse_listen_address("[::]:80", "x").loopback());
  for (const char* bad : {"9464", ":9464", "host:", "host:65536", "host:-1", "host:12ab", "::1:80",
                          "[::1]80", "[::1"}) {
    try {
      parse_listen_address(bad, "--metrics-listen");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "--metrics-listen"));
    }
  }
}

TEST(MetricFamilies, AggregateTypesAreLabelsAndHostileOnesAreEscaped) {
  RelayMetrics m;
  m.by_aggregate_type = {{"order", {3, 1, 1, 0, 0}}, {"bad\x1b[2Jtype", {1, 0, 0, 0, 0}}};
  observe::Families families;
  observe::add_relay(families, m, "");
  const std::string text = observe::serialize(families);
  EXPECT_TRUE(contains(text, "outbox_relay_events_published_total{aggregate_type=\"order\"} 3"));
  EXPECT_TRUE(contains(text, "outbox_relay_events_failed_total{aggregate_type=\"order\"} 1"));
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << "an escape character reached the output";
  EXPECT_TRUE(contains(text, "outbox_relay_health{state=\"starting\"} 1"));
  EXPECT_TRUE(contains(text, "outbox_relay_health{state=\"running\"} 0"));
}

}  // namespace
}  // namespace outbox
