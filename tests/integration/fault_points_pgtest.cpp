// The crash windows of FAULTS.md, exercised in-process: a fault point armed with "error" stops
// the component at exactly that boundary, as a crash would, and a successor must recover.
// (The crash campaign under tests/fault/ does the same with SIGKILL on real processes.)

#include <gtest/gtest.h>

#include "common/fault.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class FaultPointTest : public RelayFixture {
 protected:
  void TearDown() override { fault::arm(""); }

  // Runs a relay until the armed point throws; returns what it counted.
  RelayStats crash_relay_at(const std::string& spec) {
    fault::arm(spec);
    auto o = options("doomed");
    o.lease = 500ms;
    Relay doomed(o, sink());
    EXPECT_THROW(doomed.run_until_idle(30s), Error);
    fault::arm("");
    return doomed.stats();
  }

  // A successor relay publishes whatever is left once the dead relay's leases expire.
  void recover() {
    Relay successor(options("successor"), sink());
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (unpublished() > 0 && std::chrono::steady_clock::now() < deadline) {
      successor.run_until_idle(500ms);
    }
    EXPECT_EQ(unpublished(), 0);
  }

  std::size_t messages_on_topic(std::size_t at_least) {
    // Everything is on the topic already (the successor finished): a short read is enough.
    return read_topic(kafka().bootstrap_servers(), topic_, at_least, 3s).size();
  }
};

TEST_F(FaultPointTest, ACrashAfterTheClaimLeavesRowsToTheNextRelay) {
  const auto ids = enqueue(4, 2);
  crash_relay_at("relay.after_claim=error@1");
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE claimed_by LIKE 'doomed:%'"),
            4)
      << "the claim committed before the crash";
  recover();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(messages_on_topic(ids.size() + 1), ids.size()) << "nothing was sent before the crash";
}

TEST_F(FaultPointTest, ACrashAfterTheAckBeforeTheMarkRepublishesNeverLoses) {
  const auto ids = enqueue(4, 2);
  const auto stats = crash_relay_at("relay.after_ack_before_mark=error@1");
  EXPECT_EQ(stats.published, 0U);
  recover();
  expect_on_broker_in_order(ids);
  const auto on_topic = messages_on_topic(ids.size() + 4);
  EXPECT_GT(on_topic, ids.size()) << "the acknowledged but unmarked events go out again";
  EXPECT_LE(on_topic, ids.size() + 4);
}

// Only what was still in flight at the crash (at most one head per aggregate) goes out twice.
TEST_F(FaultPointTest, ACrashAfterAMarkRepublishesAtMostWhatWasInFlight) {
  const auto ids = enqueue(4, 2);
  crash_relay_at("relay.after_mark=error@1");
  recover();
  expect_on_broker_in_order(ids);
  EXPECT_LE(messages_on_topic(ids.size() + 4), ids.size() + 3);
}

TEST_F(FaultPointTest, ACommitThatNeverReturnedIsFoundInTheDatabase) {
  fault::arm("producer.after_commit=error@1");
  const Producer producer(ProducerOptions{schema_, 4096});
  pg::exec(conn(), "BEGIN");
  const auto enqueued = producer.enqueue(conn(), NewEvent{"order", "o", "Step", "{}", "{}", 1, {}});
  EXPECT_THROW(outbox::commit(conn()), Error);
  fault::arm("");
  EXPECT_EQ(transaction_status(conn(), enqueued.transaction_id), TransactionStatus::committed);
  EXPECT_EQ(unpublished(), 1);
}

TEST(FaultSpec, MalformedSpecsAreRefusedWithTheEntry) {
  for (const char* bad :
       {"relay.after_claim", "=kill", "relay.after_claim=explode", "relay.after_claim=kill@0",
        "relay.after_claim=delay:soon", "relay.after_claim=kill@x"}) {
    try {
      fault::arm(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("OUTBOX_FAULTS entry"), std::string::npos) << e.what();
    }
  }
  fault::arm("");
  EXPECT_FALSE(fault::armed());
}

TEST(FaultSpec, FiresOnceOnTheNthHit) {
  fault::arm("relay.after_claim=error@3,relay.after_mark=delay:1");
  EXPECT_TRUE(fault::armed());
  EXPECT_NO_THROW(fault::hit(fault::kRelayAfterClaim));
  EXPECT_NO_THROW(fault::hit(fault::kRelayAfterClaim));
  EXPECT_THROW(fault::hit(fault::kRelayAfterClaim), Error);
  EXPECT_NO_THROW(fault::hit(fault::kRelayAfterClaim));
  EXPECT_NO_THROW(fault::hit(fault::kRelayAfterMark));
  EXPECT_NO_THROW(fault::hit(fault::kCleanupMidBatch));
  EXPECT_EQ(fault::hits(fault::kRelayAfterClaim), 4);
  fault::arm("");
}

// A misspelt point would arm nothing and a campaign would inject nothing, silently.
TEST(FaultSpec, AnUnknownPointIsRefusedAndTheKnownOnesNamed) {
  try {
    fault::arm("relay.after_clam=kill");
    ADD_FAILURE() << "a misspelt point was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("relay.after_clam"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fault::kRelayAfterClaim), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fault::armed());
}

// ctest runs this binary with OUTBOX_FAULTS set (tests/CMakeLists.txt): a library never arms
// itself from the environment, only a main() that asks for it.
TEST(FaultSpec, TheEnvironmentArmsNothingUntilAProgramAsks) {
  const char* spec = std::getenv("OUTBOX_FAULTS");
  if (spec == nullptr) GTEST_SKIP() << "run through ctest, which sets OUTBOX_FAULTS";
  EXPECT_FALSE(fault::armed());
  EXPECT_EQ(fault::arm_from_environment(), spec);
  EXPECT_TRUE(fault::armed());
  fault::arm("");
}

}  // namespace
}  // namespace outbox::testing
