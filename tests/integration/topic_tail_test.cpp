// The campaigns' topic readers against librdkafka's mock, which keeps 5 MiB a partition and drops
// the oldest messages beyond that: read only at the end, a partition's first messages are gone
// (and offset_gaps says so); read by a TopicTail as they come, none is missed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "outbox/testing/kafka_mock.hpp"
#include "support/kafka_reader.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

std::vector<RawMessage> quarter_mebibytes(int n, int& next_sequence) {
  std::vector<RawMessage> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({"k",
                   std::string(256 * 1024, 'x'),
                   {{"aggregate_sequence", std::to_string(next_sequence++)}}});
  }
  return out;
}

TEST(TopicTail, ReadsWhatTheBrokerDropsLaterAndOffsetGapsFindsWhatTheEndAloneMissed) {
  const std::string topic = "topic-tail";
  kafka().create_topic(topic, 2, 1);
  TopicTail tail(kafka().bootstrap_servers(), topic, {"aggregate_sequence"});
  int sequence = 1;
  // 8 MiB to partition 0, 1 MiB at a time, each read by the tail before the next is written.
  for (int chunk = 0; chunk < 8; ++chunk) {
    produce_to_partition(kafka().bootstrap_servers(), topic, 0, quarter_mebibytes(4, sequence));
    ASSERT_EQ(tail.read_to_end(20s).size(), static_cast<std::size_t>(4 * (chunk + 1)));
  }
  produce_to_partition(kafka().bootstrap_servers(), topic, 1, quarter_mebibytes(1, sequence));

  const auto [low, high] = watermarks(kafka().bootstrap_servers(), topic, 0);
  ASSERT_EQ(high, 32);
  ASSERT_GT(low, 0) << "the mock kept every message: nothing to test";

  const std::vector<ReadMessage> at_the_end =
      read_whole_topic(kafka().bootstrap_servers(), topic, 20s);
  EXPECT_EQ(at_the_end.size(), static_cast<std::size_t>(32 - low + 1));
  EXPECT_EQ(offset_gaps(at_the_end), (std::vector<OffsetGap>{{0, 0, low - 1}}));

  const std::vector<ReadMessage> tailed = tail.read_to_end(20s);
  ASSERT_EQ(tailed.size(), 33U);
  EXPECT_TRUE(offset_gaps(tailed).empty());
  for (int i = 0; i < 32; ++i) {  // partition 0 whole, in order, then partition 1
    EXPECT_EQ(tailed[static_cast<std::size_t>(i)].partition, 0);
    EXPECT_EQ(tailed[static_cast<std::size_t>(i)].offset, i);
    EXPECT_EQ(tailed[static_cast<std::size_t>(i)].headers.at("aggregate_sequence"),
              std::to_string(i + 1));
    EXPECT_TRUE(tailed[static_cast<std::size_t>(i)].value.empty()) << "values are not kept";
  }
  EXPECT_EQ(tailed[32].partition, 1);
}

TEST(OffsetGaps, CountsFromOffsetZeroAndBetweenMessagesPerPartition) {
  auto at = [](int partition, long long offset) {
    ReadMessage m;
    m.partition = partition;
    m.offset = offset;
    return m;
  };
  EXPECT_TRUE(offset_gaps({at(0, 0), at(0, 1), at(1, 0)}).empty());
  EXPECT_EQ(offset_gaps({at(0, 2), at(0, 3), at(0, 7), at(1, 0)}),
            (std::vector<OffsetGap>{{0, 0, 1}, {0, 4, 6}}));
  // With the partitions' ends: what was not read before them, partitions with nothing read too.
  EXPECT_EQ(offset_gaps({at(0, 0), at(0, 1), at(1, 0)}, {{0, 4}, {1, 1}, {2, 3}, {3, 0}}),
            (std::vector<OffsetGap>{{0, 2, 3}, {2, 0, 2}}));
}

}  // namespace
}  // namespace outbox::testing
