// The change-data-capture relay (RelaySource::cdc) end to end: a real PostgreSQL 15 with a
// logical slot, the Kafka mock cluster, the same guarantees as polling.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "outbox/relay.hpp"
#include "support/relay_fixture.hpp"
#include "support/test_env.hpp"
#include "support/test_sinks.hpp"

namespace outbox::testing {
namespace {

// Fails the first send of one aggregate's given sequence retryably, as a broker outage would.
class FailOnceSink final : public Sink {
 public:
  FailOnceSink(std::unique_ptr<Sink> inner, std::string aggregate_id, std::int64_t sequence)
      : inner_(std::move(inner)), aggregate_id_(std::move(aggregate_id)), sequence_(sequence) {}
  void send(const Event& event, std::uint64_t ticket) override {
    if (!failed_ && event.aggregate_id == aggregate_id_ &&
        event.aggregate_sequence == sequence_) {
      failed_ = true;
      failing_.push_back(ticket);
      return;
    }
    inner_->send(event, ticket);
  }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    for (const std::uint64_t ticket : failing_) {
      reports.push_back({ticket, DeliveryOutcome::retryable_failure, "refused on purpose", -1, -1});
    }
    if (!failing_.empty()) max_wait = std::chrono::milliseconds(0);
    failing_.clear();
    inner_->poll(max_wait, reports);
  }
  [[nodiscard]] std::size_t in_flight() const override {
    return inner_->in_flight() + failing_.size();
  }
  [[nodiscard]] std::string describe() const override { return "fail-once " + inner_->describe(); }

 private:
  std::unique_ptr<Sink> inner_;
  std::string aggregate_id_;
  std::int64_t sequence_;
  bool failed_ = false;
  std::vector<std::uint64_t> failing_;
};

class CdcRelayTest : public RelayFixture {
 protected:
  RelayOptions cdc_options(const std::string& id) {
    RelayOptions o = options(id);
    o.source = RelaySource::cdc;
    o.cdc.slot = "s_" + schema_.name().substr(0, 50);
    o.cdc.table_poll = 100ms;
    o.cdc.horizon_grace = 1s;
    o.backoff_base = 100ms;
    o.backoff_max = 200ms;
    return o;
  }

  // Runs `relay` on a thread until destroyed.
  struct Running {
    explicit Running(Relay& r) : relay(r), thread([this] { relay.run(); }) {}
    ~Running() { stop(); }
    void stop() {
      relay.request_stop();
      if (thread.joinable()) thread.join();
    }
    Relay& relay;
    std::thread thread;
  };

  long long rows(const std::string& condition) {
    return count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") + " WHERE " +
                             condition);
  }
  bool all_published() {
    return wait_until([&] { return unpublished() == 0; }, 20s);
  }
};

TEST_F(CdcRelayTest, PublishesEveryCommittedEventInOrderFromTheStreamWithoutClaims) {
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::vector<EventId> ids = enqueue(20, 5);
  const std::string after_last_commit(
      pg::exec(conn(), "SELECT pg_current_wal_lsn()::text").text(0, 0));
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  // The slot is confirmed past the last commit: a restart does not stream them again.
  const std::string slot = cdc_options("x").cdc.slot;
  EXPECT_TRUE(wait_until(
      [&] {
        return count(conn(),
                     "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND "
                     "confirmed_flush_lsn >= $2::pg_lsn",
                     {slot.c_str(), after_last_commit.c_str()}) == 1;
      },
      10s));
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "the stream's events are never claimed";
  EXPECT_EQ(relay.stats().published, ids.size());
  EXPECT_EQ(relay.stats().fenced, 0U);
}

TEST_F(CdcRelayTest, RowsFromBeforeTheSlotArePublishedByItsOwnClaimAndOrderHolds) {
  std::vector<EventId> ids = enqueue(10, 3);  // no slot yet: the stream will never bring these
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::vector<EventId> later = enqueue(10, 2);  // sequences 4 and 5, through the stream
  ids.insert(ids.end(), later.begin(), later.end());
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("aggregate_sequence <= 3 AND claimed_by IS NULL"), 0)
      << "rows from before the slot go through the relay's own claim";
}

TEST_F(CdcRelayTest, ARestartResumesWhereTheSlotWasConfirmedAndLosesNothing) {
  std::vector<EventId> ids;
  {
    Relay relay(cdc_options("cdc-1"), sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    ids = enqueue(5, 4);
    ASSERT_TRUE(all_published()) << relay.stats().last_error;
  }
  const std::vector<EventId> while_down = enqueue(5, 3);  // the slot keeps them
  ids.insert(ids.end(), while_down.begin(), while_down.end());
  Relay relay(cdc_options("cdc-2"), sink());
  Running running(relay);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "the slot, not the claim, brought them";
}

TEST_F(CdcRelayTest, AFailedSendIsRetriedFromTheTableAndItsAggregateWaitsBehindIt) {
  Relay relay(cdc_options("cdc"),
              std::make_unique<FailOnceSink>(sink(), "agg-3", std::int64_t{2}));
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::vector<EventId> ids = enqueue(6, 5);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().failed, 1U);
  EXPECT_EQ(rows("aggregate_id = 'agg-3' AND aggregate_sequence = 2 AND attempt_count = 1 AND "
                 "claimed_by IS NOT NULL"),
            1)
      << "the failed event was retried by the relay's own claim";
  EXPECT_EQ(rows("aggregate_id <> 'agg-3' AND claimed_by IS NOT NULL"), 0)
      << "other aggregates were not held up";
}

}  // namespace
}  // namespace outbox::testing
