// The relay's option checks: every value that cannot work is refused before anything connects,
// with a message naming the option.
#include "relay/relay_options.hpp"

#include <gtest/gtest.h>

#include <string>

#include "cdc/slot_admin.hpp"
#include "outbox/error.hpp"

namespace outbox::detail {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kShortestIdleWait{5};

// The InvalidArgument `options` gives, or "" when they pass.
std::string refusal(const RelayOptions& options) {
  try {
    (void)checked(options, kShortestIdleWait);
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

TEST(RelayOptionsCheck, TheDefaultsPassAndGetARelayId) {
  const RelayOptions options = checked(RelayOptions{}, kShortestIdleWait);
  EXPECT_FALSE(options.relay_id.empty());
}

// Issue 23 (low): a dead session's claims are taken over by its name as a prefix of their tokens
// ("<relay id>:<session>"); a relay id with ':' could make a live session look like a dead one's.
TEST(RelayOptionsCheck, ARelayIdWithAColonAControlCharacterOrTooLongIsRefused) {
  RelayOptions options;
  options.relay_id = "a:0000000000000001:x";
  EXPECT_NE(refusal(options).find("has a ':'"), std::string::npos) << refusal(options);
  options.relay_id = "relay\x1b[2J";
  EXPECT_NE(refusal(options).find("control character"), std::string::npos) << refusal(options);
  EXPECT_EQ(refusal(options).find('\x1b'), std::string::npos) << "shown escaped";
  options.relay_id = std::string(101, 'r');
  EXPECT_NE(refusal(options).find("at most 100"), std::string::npos);
  options.relay_id = "   ";
  EXPECT_NE(refusal(options).find("is blank"), std::string::npos);
  for (const char* good : {"relay-1", "host.example.com-42", "billing_relay", "r\xc3\xa9lai"}) {
    options.relay_id = good;
    EXPECT_EQ(refusal(options), "") << good;
  }
}

TEST(RelayOptionsCheck, AByteBudgetOfZeroOrBeyondOneTebibyteIsRefused) {
  RelayOptions options;
  options.max_in_flight_bytes = 0;
  EXPECT_NE(refusal(options).find("max_in_flight_bytes"), std::string::npos);
  options.max_in_flight_bytes = kMaxInFlightBytes + 1;
  EXPECT_NE(refusal(options).find("max_in_flight_bytes is 1099511627777"), std::string::npos)
      << refusal(options);
  options.max_in_flight_bytes = UINT64_MAX;  // must not reach the SQL (a bigint)
  EXPECT_NE(refusal(options).find("at most 1 TiB"), std::string::npos) << refusal(options);
  options.max_in_flight_bytes = kMaxInFlightBytes;
  EXPECT_EQ(refusal(options), "");
}

TEST(RelayOptionsCheck, ABatchLargerThanAClaimTakesIsRefused) {
  RelayOptions options;
  options.batch_size = kMaxBatchSize + 1;
  EXPECT_NE(refusal(options).find("batch_size is 100001"), std::string::npos) << refusal(options);
  options.batch_size = 0;
  EXPECT_NE(refusal(options).find("batch_size"), std::string::npos);
  options.batch_size = kMaxBatchSize;
  EXPECT_EQ(refusal(options), "");
}

TEST(RelayOptionsCheck, EachUnworkableValueIsRefusedByName) {
  auto with = [](auto change) {
    RelayOptions options;
    change(options);
    return refusal(options);
  };
  EXPECT_NE(with([](RelayOptions& o) { o.max_in_flight = 0; }).find("max_in_flight"),
            std::string::npos);
  EXPECT_NE(with([](RelayOptions& o) { o.max_attempts = -1; }).find("max_attempts"),
            std::string::npos);
  EXPECT_NE(with([](RelayOptions& o) { o.idle_poll_max = milliseconds(1); }).find("idle_poll_max"),
            std::string::npos);
  EXPECT_NE(with([](RelayOptions& o) { o.lease = milliseconds(99); }).find("lease"),
            std::string::npos);
  // --backoff-base-ms 100000 --backoff-max-ms 10: a first delay longer than the longest.
  const std::string reversed = with([](RelayOptions& o) {
    o.backoff_base = milliseconds(100000);
    o.backoff_max = milliseconds(10);
  });
  EXPECT_NE(reversed.find("backoff_base (--backoff-base-ms) is 1m40s and backoff_max"),
            std::string::npos)
      << reversed;
  EXPECT_NE(with([](RelayOptions& o) {
              o.reconnect_backoff_base = milliseconds(0);
            }).find("reconnect_backoff_base"),
            std::string::npos);
}

TEST(RelayOptionsCheck, ChangeDataCaptureOptionsAreCheckedOnlyForThatSource) {
  RelayOptions options;
  options.cdc.slot = "Bad-Slot";
  EXPECT_EQ(refusal(options), "") << "a polling relay has no slot";
  options.source = RelaySource::cdc;
  EXPECT_NE(refusal(options).find("slot name"), std::string::npos) << refusal(options);
  options.cdc.slot = "outbox";
  options.cdc.takeover = milliseconds(100);
  EXPECT_NE(refusal(options).find("cdc.takeover"), std::string::npos) << refusal(options);
  options.cdc.takeover = milliseconds(5000);
  options.cdc.table_poll = milliseconds(1);
  EXPECT_NE(refusal(options).find("cdc.table_poll"), std::string::npos);
  options.cdc.table_poll = milliseconds::max();  // ten of them would overflow the sweep's hold
  EXPECT_NE(refusal(options).find("between 10 ms and 1 hour"), std::string::npos);
  options.cdc.table_poll = milliseconds(500);
  EXPECT_EQ(refusal(options), "");
}

TEST(RelayOptionsCheck,
     ATakeoverPastAnHourAndAWalBudgetUnderOneMebibyteOrPastOnePebibyteAreRefused) {
  RelayOptions options;
  options.source = RelaySource::cdc;
  options.cdc.takeover = std::chrono::hours(2);
  EXPECT_NE(refusal(options).find("at most 1 hour"), std::string::npos) << refusal(options);
  options.cdc.takeover = std::chrono::hours(1);
  EXPECT_EQ(refusal(options), "");
  options.cdc.wal_budget = (std::uint64_t{1} << 20) - 1;
  EXPECT_NE(refusal(options).find("cdc.wal_budget"), std::string::npos) << refusal(options);
  options.cdc.wal_budget = std::uint64_t{1} << 20;
  EXPECT_EQ(refusal(options), "");
  options.cdc.wal_budget = 0;
  EXPECT_EQ(refusal(options), "") << "0 turns the budget off";
  options.cdc.wal_budget = std::uint64_t{1} << 50;
  EXPECT_EQ(refusal(options), "");
  // Past INT64_MAX it would read as negative beside the slot's bytes and let the slot go each
  // second.
  for (std::uint64_t huge : {(std::uint64_t{1} << 50) + 1, ~std::uint64_t{0}}) {
    options.cdc.wal_budget = huge;
    EXPECT_NE(refusal(options).find("at most 1 PiB"), std::string::npos) << refusal(options);
  }
}

TEST(RelayOptionsCheck, ShardsAreOneToSixtyFourAndTheShardOneOfThem) {
  RelayOptions options;
  options.source = RelaySource::cdc;
  options.cdc.shards = 0;
  EXPECT_NE(refusal(options).find("cdc.shards"), std::string::npos) << refusal(options);
  options.cdc.shards = kMaxShards + 1;
  EXPECT_NE(refusal(options).find("cdc.shards"), std::string::npos);
  options.cdc.shards = 4;
  options.cdc.shard = 4;
  EXPECT_NE(refusal(options).find("shard 0 to shards - 1"), std::string::npos);
  options.cdc.shard = 3;
  EXPECT_EQ(refusal(options), "");
  EXPECT_EQ(shard_slot_name(options.cdc), "outbox_3_of_4");
  EXPECT_EQ(shard_publication_name(options.cdc, "p"), "p_3_of_4");
  options.cdc.slot = std::string(58, 'a');  // fits alone, not with "_3_of_4"
  EXPECT_NE(refusal(options).find("63"), std::string::npos) << refusal(options);
  options.cdc.shards = 1;
  options.cdc.shard = 0;
  EXPECT_EQ(refusal(options), "");
  EXPECT_EQ(shard_slot_name(options.cdc), options.cdc.slot);
}

TEST(CdcShardNames, OnlyTheNamesAShardingWritesCountAsOne) {
  EXPECT_EQ(cdc::sharding_of(""), 1U);
  EXPECT_EQ(cdc::sharding_of("_0_of_2"), 2U);
  EXPECT_EQ(cdc::sharding_of("_63_of_64"), 64U);
  for (const char* other :
       {"_2", "_7_of_2", "_0_of_0", "_0_of_1", "_1_of_02", "_01_of_2", "_0_of_65", "_0_of_2x",
        "x_0_of_2", "_of_2", "_0_of_", "_a_of_2", "_0_of_100"}) {
    EXPECT_EQ(cdc::sharding_of(other), std::nullopt) << other;
  }
}

}  // namespace
}  // namespace outbox::detail
