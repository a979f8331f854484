// The change-data-capture relay (RelaySource::cdc) end to end: a real PostgreSQL 15 with a
// logical slot, the Kafka mock cluster, the same guarantees as polling.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <thread>

#include "outbox/relay.hpp"
#include "outbox/status.hpp"
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
    if (!failed_ && event.aggregate_id == aggregate_id_ && event.aggregate_sequence == sequence_) {
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

// Blocks the relay's loop inside poll() while stalled: a relay paused or frozen.
class StallingSink final : public Sink {
 public:
  explicit StallingSink(std::unique_ptr<Sink> inner) : inner_(std::move(inner)) {}
  void send(const Event& event, std::uint64_t ticket) override { inner_->send(event, ticket); }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    while (stalled_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    inner_->poll(max_wait, reports);
  }
  [[nodiscard]] std::size_t in_flight() const override { return inner_->in_flight(); }
  [[nodiscard]] std::string describe() const override { return inner_->describe(); }
  void stall(bool on) { stalled_.store(on); }

 private:
  std::unique_ptr<Sink> inner_;
  std::atomic<bool> stalled_{false};
};

// Holds every send while held (no report: a broker that takes and never answers); on release the
// held events go to the inner sink. The relay's loop keeps running meanwhile.
class HoldingSink final : public Sink {
 public:
  explicit HoldingSink(std::unique_ptr<Sink> inner) : inner_(std::move(inner)) {}
  void send(const Event& event, std::uint64_t ticket) override {
    if (held_.load()) {
      waiting_.emplace_back(event, ticket);
    } else {
      inner_->send(event, ticket);
    }
  }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    if (!held_.load()) {
      for (const auto& [event, ticket] : waiting_) inner_->send(event, ticket);
      waiting_.clear();
    }
    inner_->poll(max_wait, reports);
  }
  [[nodiscard]] std::size_t in_flight() const override {
    return inner_->in_flight() + waiting_.size();
  }
  [[nodiscard]] std::string describe() const override { return "holding " + inner_->describe(); }
  void hold(bool on) { held_.store(on); }

 private:
  std::unique_ptr<Sink> inner_;
  std::atomic<bool> held_{false};
  std::vector<std::pair<Event, std::uint64_t>> waiting_;
};

// Holds the first send of one aggregate's given sequence for `hold`, then fails it retryably: an
// event that stays in flight a while and then needs a retry.
class SlowFailOnceSink final : public Sink {
 public:
  SlowFailOnceSink(std::unique_ptr<Sink> inner, std::string aggregate_id, std::int64_t sequence,
                   std::chrono::milliseconds hold)
      : inner_(std::move(inner)),
        aggregate_id_(std::move(aggregate_id)),
        sequence_(sequence),
        hold_(hold) {}
  void send(const Event& event, std::uint64_t ticket) override {
    if (!taken_ && event.aggregate_id == aggregate_id_ && event.aggregate_sequence == sequence_) {
      taken_ = true;
      held_ = ticket;
      since_ = std::chrono::steady_clock::now();
      return;
    }
    inner_->send(event, ticket);
  }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    if (held_ && std::chrono::steady_clock::now() - since_ >= hold_) {
      reports.push_back({*held_, DeliveryOutcome::retryable_failure, "held, then refused", -1, -1});
      held_.reset();
      max_wait = std::chrono::milliseconds(0);
    }
    inner_->poll(std::min(max_wait, std::chrono::milliseconds(50)), reports);
  }
  [[nodiscard]] std::size_t in_flight() const override {
    return inner_->in_flight() + (held_ ? 1 : 0);
  }
  [[nodiscard]] std::string describe() const override { return "slow-fail " + inner_->describe(); }

 private:
  std::unique_ptr<Sink> inner_;
  std::string aggregate_id_;
  std::int64_t sequence_;
  std::chrono::milliseconds hold_;
  bool taken_ = false;
  std::optional<std::uint64_t> held_;
  std::chrono::steady_clock::time_point since_;
};

class CdcRelayTest : public RelayFixture {
 protected:
  // Each test's slot goes with it: the cluster has max_replication_slots for all tests of a run.
  void TearDown() override {
    const std::string slot = cdc_options("x").cdc.slot;
    try {
      pg::exec(conn(),
               "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
               "WHERE starts_with(slot_name::text, $1) AND NOT active",
               {slot.c_str()});
    } catch (const DatabaseError& error) {
      std::cerr << "leaving slot " << slot << ": " << error.what() << "\n";
    }
  }

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
    return count(conn(),
                 "SELECT count(*) FROM " + schema_.table("outbox_events") + " WHERE " + condition);
  }
  bool all_published() {
    return wait_until([&] { return unpublished() == 0; }, 20s);
  }
  [[nodiscard]] std::string wal_now() {
    return std::string(pg::exec(conn(), "SELECT pg_current_wal_lsn()::text").text(0, 0));
  }
  // Whether the test's slot is confirmed past `lsn` within 10 s.
  bool slot_confirmed_past(const std::string& lsn) {
    const std::string slot = cdc_options("x").cdc.slot;
    return wait_until(
        [&] {
          return count(conn(),
                       "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND "
                       "confirmed_flush_lsn >= $2::pg_lsn",
                       {slot.c_str(), lsn.c_str()}) == 1;
        },
        10s);
  }
};

TEST_F(CdcRelayTest, PublishesEveryCommittedEventInOrderFromTheStreamWithoutClaims) {
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::vector<EventId> ids = enqueue(20, 5);
  const std::string after_last_commit = wal_now();
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  // The slot is confirmed past the last commit: a restart does not stream them again.
  EXPECT_TRUE(slot_confirmed_past(after_last_commit));
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
  // Each aggregate's first event after the restart is checked against the table; the two behind
  // it follow this relay's own sends, in transactions long ended: sent without the statement.
  EXPECT_GE(relay.stats().unchecked, 5U);
  EXPECT_LE(relay.stats().unchecked, 10U);
}

// Streamed events are marked on a session of their own while the loop goes on (StreamedMarks).
// That session killed: what it had not answered is marked again on a new one, nothing is lost,
// nothing fenced, and order holds.
TEST_F(CdcRelayTest, TheMarkSessionKilledLosesNothingAndMarksOnANewOne) {
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  std::vector<EventId> ids = enqueue(10, 3);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  // The relay's session that marks: no advisory lock (the table path's session holds one), and
  // its last statement names this test's table.
  const std::string table = schema_.table("outbox_events");
  const auto kill_marks = [&] {
    return count(conn(),
                 "SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a "
                 "WHERE a.application_name = 'outbox-relay' AND a.backend_type = 'client backend' "
                 "AND position($1 in a.query) > 0 AND NOT EXISTS (SELECT 1 FROM pg_locks l "
                 "WHERE l.pid = a.pid AND l.locktype = 'advisory')",
                 {table.c_str()});
  };
  // One or two: a second lane opens when a batch comes while the first is out.
  ASSERT_GE(kill_marks(), 1) << "the relay marks on a session of its own";
  const std::uint64_t reconnects = relay.stats().reconnects;
  for (int round = 0; round < 3; ++round) {
    const std::vector<EventId> more = enqueue(10, 2);
    ids.insert(ids.end(), more.begin(), more.end());
    ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  }
  EXPECT_GT(relay.stats().reconnects, reconnects) << "the dead session was noticed";
  EXPECT_GE(kill_marks(), 1) << "and a new one marks";
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "the stream, not the table path, brought them";
  EXPECT_EQ(relay.stats().fenced, 0U);
}

// Two marks may be out at once (StreamedMarks' lanes). One held up on a row lock does not hold
// back the marks of other aggregates, nor so their next events; its own aggregate waits behind
// it, and once the lock goes its row is marked and order holds. With one mark out at a time,
// every outcome after it waited for the lock. (All within the relay sessions' lock_timeout, 5 s:
// past it the held mark fails and the relay reconnects, writing every mark before it streams.)
TEST_F(CdcRelayTest, AMarkHeldUpOnARowLockDoesNotHoldBackOtherAggregates) {
  std::vector<EventId> ids;
  {
    Relay relay(cdc_options("cdc"), sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    ids = enqueue(1, 1);  // agg-0 #1; the slot is confirmed past it
    ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  }
  const std::vector<EventId> second = enqueue(1, 1, false, 1);  // agg-0 #2, while no relay runs
  ids.insert(ids.end(), second.begin(), second.end());
  pg::Connection locker = connect();
  pg::exec(locker.get(), "BEGIN");
  pg::exec(locker.get(),
           "SELECT 1 FROM " + schema_.table("outbox_events") + " WHERE event_id = $1 FOR UPDATE",
           {second[0].to_string().c_str()});
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  const auto marks_waiting_for_a_lock = [&] {
    return count(conn(),
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-relay' "
                 "AND wait_event_type = 'Lock'");
  };
  ASSERT_TRUE(wait_until([&] { return marks_waiting_for_a_lock() == 1; }, 20s))
      << "agg-0 #2 streamed, sent, and its mark waits for the lock; " << relay.stats().last_error;
  // agg-0 #3 and #4, and two events of each of agg-1 to agg-4.
  const std::vector<EventId> more = enqueue(5, 2, false, 2);
  ids.insert(ids.end(), more.begin(), more.end());
  EXPECT_TRUE(wait_until(
      [&] { return rows("aggregate_id <> 'agg-0' AND published_at IS NULL") == 0; }, 20s))
      << "the other aggregates' marks went on the other lane; " << relay.stats().last_error;
  EXPECT_EQ(rows("aggregate_id = 'agg-0' AND published_at IS NULL"), 3)
      << "agg-0's next events wait behind its mark";
  pg::commit(locker.get());
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "the stream, not the table path, brought them";
  EXPECT_EQ(relay.stats().fenced, 0U);
}

// Under heavy live traffic the stream's new transactions wait for the loop's paced fetch (at
// most one per 3 ms, as polling's claims) instead of one check statement per transaction or two.
// Each event here is the first of a new aggregate, so every one is checked.
TEST_F(CdcRelayTest, UnderHeavyTrafficChecksArePacedNotOnePerTransaction) {
  RelayOptions o = cdc_options("cdc");
  o.batch_size = 1000;  // so that no fetch is a full batch, which is never paced
  Relay relay(o, sink({{"linger.ms", "0.5"}}));
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  enqueue(10, 1);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  const auto checks_before = relay.stats().check_queries;
  const auto started = std::chrono::steady_clock::now();
  // 1,000 transactions of 5 new aggregates each, committed by the server in a loop about 1.5 ms
  // apart (synchronously: with synchronous_commit off the walsender sends only what the WAL
  // writer flushed, every 200 ms, and the stream comes in bursts). The server's pace does not
  // depend on how fast this test's own build is.
  pg::exec(conn(), "DO $$ BEGIN FOR i IN 0..999 LOOP INSERT INTO " +
                       schema_.table("outbox_events") +
                       " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                       " payload) SELECT gen_random_uuid(), 'order', 'o-' || i || '-' || a, 1,"
                       " 'Step', '{}' FROM generate_series(0, 4) a; COMMIT; PERFORM "
                       "pg_sleep(0.0005); END LOOP; END $$");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  const auto checks = relay.stats().check_queries - checks_before;
  const double until_published =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  running.stop();
  EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "the stream, not the table path, brought them";
  EXPECT_EQ(relay.stats().published, 10U + 5'000U);
  EXPECT_GT(checks, 0U) << "new aggregates' first events are always checked";
  // At most one check per 3 ms from the commits' start to the last publish, plus slack for the
  // traffic's first ones (not paced yet). Unpaced, 967-1,021 checks in 1.5-1.9 s here (one per
  // transaction or so); paced, 425-450 in 1.7 s.
  EXPECT_LE(static_cast<double>(checks), until_published / 0.003 * 1.1 + 20)
      << checks << " checks; 1,000 transactions committed in " << seconds << " s, published in "
      << until_published << " s";
}

TEST_F(CdcRelayTest, AFailedSendIsRetriedFromTheTableAndItsAggregateWaitsBehindIt) {
  Relay relay(cdc_options("cdc"), std::make_unique<FailOnceSink>(sink(), "agg-3", std::int64_t{2}));
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

// A publication of that name that lacks this outbox table (the schema was dropped and migrated
// again) gets the table added; the stream then carries the events.
TEST_F(CdcRelayTest, APublicationWithoutTheTableGetsItAdded) {
  const std::string publication = schema_.name() + "_outbox";
  pg::exec(conn(), "CREATE PUBLICATION \"" + publication + "\"");
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1",
                  {publication.c_str()}),
            1);
  const std::vector<EventId> ids = enqueue(4, 3);
  ASSERT_TRUE(all_published()) << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "streamed, not claimed";
}

// Issue 23, item 14: `--publication PubX` given to a relay whose slot was made before PubX existed
// created PubX, then stopped on PostgreSQL's "publication "PubX" does not exist" (PostgreSQL 15
// decodes a change under the catalog of its time), on every start. The slot is made again (the
// table path publishes what it held) and the relay streams on; nothing is lost.
TEST_F(CdcRelayTest, ASlotOlderThanItsPublicationIsMadeAgainAndNothingIsLost) {
  std::vector<EventId> ids;
  {
    Relay relay(cdc_options("first"), sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    ids = enqueue(2, 2);
    ASSERT_TRUE(all_published()) << relay.stats().last_error;
  }
  const std::vector<EventId> meanwhile = enqueue(2, 2, false, 2);  // in the slot, before PubX
  RelayOptions o = cdc_options("second");
  o.cdc.publication = "Pub" + schema_.name().substr(0, 40) + "X";
  Relay relay(o, sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return unpublished() == 0; }, 20s)) << relay.stats().last_error;
  const std::vector<EventId> later = enqueue(2, 2, false, 4);
  ASSERT_TRUE(all_published()) << relay.stats().last_error;
  EXPECT_EQ(relay.stats().health, Health::running) << relay.stats().last_error;
  running.stop();
  ids.insert(ids.end(), meanwhile.begin(), meanwhile.end());
  ids.insert(ids.end(), later.begin(), later.end());
  expect_on_broker_in_order(ids);
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND "
                  "active_pid IS NULL",
                  {o.cdc.slot.c_str()}),
            1);
  pg::exec(conn(), "DROP PUBLICATION \"" + o.cdc.publication + "\"");
}

// Issue 23, item 14: a slot made with another plugin failed with PostgreSQL's "proto_version"
// error; the relay says what the slot is.
TEST_F(CdcRelayTest, ASlotOfAnotherPluginIsRefusedSayingSo) {
  const std::string slot = cdc_options("x").cdc.slot;
  pg::exec(conn(), "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
           {slot.c_str()});
  try {
    Relay relay(cdc_options("cdc"), sink());
    FAIL() << "a relay streamed from a test_decoding slot";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("made with the plugin test_decoding"),
              std::string::npos)
        << error.what();
  }
}

// A transaction larger than the relay may hold (max_in_flight_bytes) is not held in memory: its
// events stay in the table and the relay's own claim publishes them, in order, with what follows.
TEST_F(CdcRelayTest, ATransactionLargerThanTheByteBudgetGoesThroughTheTable) {
  RelayOptions o = cdc_options("cdc");
  o.max_in_flight_bytes = 4096;
  Relay relay(o, sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const Producer producer(ProducerOptions{schema_, 4096});
  std::vector<EventId> ids;
  pg::exec(conn(), "BEGIN");
  for (int i = 0; i < 200; ++i) {  // ~200 bytes each: ten times the budget in one transaction
    ids.push_back(producer
                      .enqueue(conn(), NewEvent{"order", "agg-" + std::to_string(i % 5), "Step",
                                                R"({"k":")" + std::string(180, 'x') + R"("})", "{}",
                                                1, std::nullopt})
                      .event_id);
  }
  pg::commit(conn());
  const std::vector<EventId> after = enqueue(5, 2);  // small ones behind, through the stream
  ids.insert(ids.end(), after.begin(), after.end());
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("aggregate_sequence <= 40 AND claimed_by IS NULL"), 0)
      << "the large transaction's events went through the relay's own claim";
}

// One streamer per slot: a second relay waits, retrying, and takes the slot once the first stops.
TEST_F(CdcRelayTest, ASecondRelayWaitsForTheSlotAndTakesOverWhenTheFirstStops) {
  auto first = std::make_unique<Relay>(cdc_options("first"), sink());
  auto first_running = std::make_unique<Running>(*first);
  ASSERT_TRUE(wait_until([&] { return first->stats().health == Health::running; }, 10s))
      << first->stats().last_error;
  Relay standby(cdc_options("standby"), sink());
  Running standby_running(standby);
  ASSERT_TRUE(wait_until(
      [&] {
        const RelayStats s = standby.stats();
        return s.slot_standby && s.health == Health::running;  // a standby is no outage
      },
      10s))
      << "the standby should find the slot taken: " << standby.stats().last_error;
  // `outbox status` names who streams the slot and who waits for it (each session's row, the
  // streaming one checked against pg_replication_slots).
  const std::string slot = cdc_options("x").cdc.slot;
  const auto session_of = [&](const OutboxStatus& s, const std::string& relay) {
    const auto found = std::find_if(s.relays.begin(), s.relays.end(), [&](const auto& session) {
      return session.relay_id.rfind(relay + ":", 0) == 0;
    });
    return found == s.relays.end() ? RelaySessionStatus{} : *found;
  };
  OutboxStatus status;
  ASSERT_TRUE(wait_until(
      [&] {
        status = read_status(conn(), schema_);
        return status.slots.size() == 1 && !status.slots[0].streamed_by.empty() &&
               status.slots[0].standbys.size() == 1;
      },
      10s))
      << "status should name the streaming relay and the standby";
  EXPECT_EQ(status.slots[0].name, slot);
  EXPECT_EQ(status.slots[0].streamed_by.rfind("first:", 0), 0U) << status.slots[0].streamed_by;
  EXPECT_EQ(status.slots[0].standbys[0].rfind("standby:", 0), 0U) << status.slots[0].standbys[0];
  EXPECT_EQ(session_of(status, "first").slot_role(), "streams slot " + slot);
  EXPECT_TRUE(session_of(status, "first").slot_streamed);
  EXPECT_EQ(session_of(status, "standby").slot_role(), "standby for slot " + slot);
  std::vector<EventId> ids = enqueue(5, 2);
  ASSERT_TRUE(all_published());
  EXPECT_EQ(standby.stats().published, 0U);

  first_running.reset();  // stops and leaves
  const auto stopped = std::chrono::steady_clock::now();
  const std::vector<EventId> later = enqueue(5, 2);
  ids.insert(ids.end(), later.begin(), later.end());
  ASSERT_TRUE(all_published()) << standby.stats().last_error;
  const auto took = std::chrono::steady_clock::now() - stopped;
  EXPECT_LT(took, 10s);
  EXPECT_GE(standby.stats().published, later.size());
  EXPECT_FALSE(standby.stats().slot_standby) << "it streams now";
  ASSERT_TRUE(wait_until(
      [&] {
        status = read_status(conn(), schema_);
        return status.slots.size() == 1 && status.slots[0].standbys.empty() &&
               status.slots[0].streamed_by.rfind("standby:", 0) == 0;
      },
      10s))
      << "status should name the former standby as the one streaming";
  EXPECT_EQ(session_of(status, "standby").slot_role(), "streams slot " + slot);
  standby_running.stop();
  expect_on_broker_in_order(ids);
}

// A relay whose loop stalls (paused, frozen) stops reporting; after cdc.takeover the server ends
// its stream and the standby takes the slot. When the stalled one wakes, it finds the slot taken
// and waits in turn. Nothing is lost, first deliveries stay in order.
TEST_F(CdcRelayTest, AStalledRelayLosesTheSlotToTheStandbyWithinTheTakeover) {
  RelayOptions stalled_options = cdc_options("stalled");
  stalled_options.cdc.takeover = 1500ms;
  auto stalling = std::make_unique<StallingSink>(sink());
  StallingSink& stall = *stalling;
  Relay stalled(stalled_options, std::move(stalling));
  Running stalled_running(stalled);
  ASSERT_TRUE(wait_until([&] { return stalled.stats().health == Health::running; }, 10s))
      << stalled.stats().last_error;
  RelayOptions standby_options = cdc_options("standby");
  standby_options.reconnect_backoff_max = 500ms;
  Relay standby(standby_options, sink());
  Running standby_running(standby);
  std::vector<EventId> ids = enqueue(5, 2);
  ASSERT_TRUE(all_published());

  stall.stall(true);
  const auto stalled_at = std::chrono::steady_clock::now();
  const std::vector<EventId> later = enqueue(5, 2);
  ids.insert(ids.end(), later.begin(), later.end());
  ASSERT_TRUE(all_published()) << standby.stats().last_error;
  const auto took = std::chrono::steady_clock::now() - stalled_at;
  std::cout << "the standby published what came after the stall "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms later\n";
  EXPECT_LT(took, 8s);
  stall.stall(false);
  const std::vector<EventId> last = enqueue(5, 1);
  ids.insert(ids.end(), last.begin(), last.end());
  ASSERT_TRUE(all_published());
  stalled_running.stop();
  standby_running.stop();
  expect_on_broker_in_order(ids);
}

// The slot is lost while the relay streams (an operator ends its walsender and drops it): the
// relay creates it again, its own claim publishes what was committed meanwhile, nothing is lost
// and first deliveries stay in order.
TEST_F(CdcRelayTest, ASlotDroppedMidStreamIsCreatedAgainAndNothingIsLost) {
  const std::string slot = cdc_options("x").cdc.slot;
  Relay relay(cdc_options("cdc"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  std::vector<EventId> ids = enqueue(8, 2);
  const bool dropped = wait_until(
      [&] {
        try {
          pg::exec(conn(),
                   "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                   "WHERE slot_name = $1 AND active_pid IS NOT NULL",
                   {slot.c_str()});
          pg::exec(conn(), "SELECT pg_drop_replication_slot($1)", {slot.c_str()});
          return true;
        } catch (const DatabaseError&) {
          return false;  // the relay took it back between the two: again
        }
      },
      10s);
  ASSERT_TRUE(dropped);
  const std::vector<EventId> meanwhile = enqueue(8, 2);  // perhaps before the new slot exists
  ids.insert(ids.end(), meanwhile.begin(), meanwhile.end());
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  const std::vector<EventId> after = enqueue(8, 1);
  ids.insert(ids.end(), after.begin(), after.end());
  ASSERT_TRUE(all_published()) << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                  {slot.c_str()}),
            1)
      << "the relay created its slot again";
}

// A slot that fell behind max_slot_wal_keep_size while its relay was down is invalidated by
// PostgreSQL; the relay drops it, creates it again, and publishes what it held from the table.
TEST_F(CdcRelayTest, ASlotInvalidatedWhileTheRelayWasDownIsReplacedAndNothingIsLost) {
  const std::string slot = cdc_options("x").cdc.slot;
  std::vector<EventId> ids;
  {
    Relay relay(cdc_options("before"), sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    ids = enqueue(5, 2);
    ASSERT_TRUE(all_published());
  }
  pg::exec(conn(), "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
  pg::exec(conn(), "SELECT pg_reload_conf()");
  std::this_thread::sleep_for(200ms);
  const std::vector<EventId> while_down = enqueue(5, 3);
  ids.insert(ids.end(), while_down.begin(), while_down.end());
  std::string status;
  for (int round = 0; round < 20 && status != "lost"; ++round) {
    pg::exec(conn(), "SELECT pg_switch_wal()");
    pg::exec(conn(), "CHECKPOINT");
    status = pg::exec(conn(),
                      "SELECT coalesce(wal_status, '') FROM pg_replication_slots "
                      "WHERE slot_name = $1",
                      {slot.c_str()})
                 .text(0, 0);
  }
  pg::exec(conn(), "ALTER SYSTEM RESET max_slot_wal_keep_size");
  pg::exec(conn(), "SELECT pg_reload_conf()");
  ASSERT_EQ(status, "lost");

  Relay relay(cdc_options("after"), sink());
  Running running(relay);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  const std::vector<EventId> after = enqueue(5, 1);
  ids.insert(ids.end(), after.begin(), after.end());
  ASSERT_TRUE(all_published()) << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("aggregate_sequence BETWEEN 3 AND 5 AND claimed_by IS NULL"), 0)
      << "what the lost slot held came through the relay's own claim";
}

// A broker that takes sends and never answers holds the slot's confirmed position while WAL piles
// up. Past its WAL budget the relay lets the slot go (PostgreSQL may remove that WAL), publishes
// from the table by polling, and once caught up streams again from a new slot: nothing lost,
// first deliveries in order across both switches.
TEST_F(CdcRelayTest, OverTheWalBudgetTheRelayLetsTheSlotGoPollsAndStreamsAgainOnceCaughtUp) {
  const std::string slot = cdc_options("x").cdc.slot;
  RelayOptions o = cdc_options("budget");
  o.cdc.wal_budget = std::uint64_t{1} << 20;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& broker = *holding;
  Relay relay(o, std::move(holding));
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  std::vector<EventId> ids = enqueue(4, 2);
  ASSERT_TRUE(all_published());
  ASSERT_TRUE(wait_until(
      [&] {
        const RelayStats s = relay.stats();
        return s.slot_retained_bytes >= 0 && s.slot_lag_bytes >= 0 && s.slot_lag_ms >= 0;
      },
      5s))
      << "the slot's lag is reported while streaming";
  EXPECT_LT(relay.stats().slot_lag_ms, 5000) << "caught up: the lag is the look's own age";

  broker.hold(true);
  const std::vector<EventId> held = enqueue(4, 2);  // streamed, sent, never acknowledged
  ids.insert(ids.end(), held.begin(), held.end());
  pg::exec(conn(), "CREATE TABLE " + schema_.table("filler") +
                       " AS SELECT repeat('x', 1000) AS x FROM generate_series(1, 3000)");
  ASSERT_TRUE(wait_until([&] { return relay.stats().polling_fallback; }, 15s))
      << "retained " << relay.stats().slot_retained_bytes << " bytes";
  EXPECT_EQ(relay.stats().slot_released, 1U);
  EXPECT_TRUE(wait_until(
      [&] {
        return count(conn(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                     {slot.c_str()}) == 0;
      },
      5s))
      << "the relay dropped the slot it let go";
  const std::vector<EventId> polled = enqueue(4, 2);  // committed with no slot: the table's
  ids.insert(ids.end(), polled.begin(), polled.end());
  std::this_thread::sleep_for(300ms);
  broker.hold(false);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  EXPECT_EQ(rows("aggregate_sequence BETWEEN 5 AND 6 AND claimed_by IS NULL"), 0)
      << "what was committed with no slot came through the relay's own claim";

  ASSERT_TRUE(wait_until([&] { return !relay.stats().polling_fallback; }, 15s))
      << "streaming again once caught up";
  EXPECT_EQ(
      count(conn(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active",
            {slot.c_str()}),
      1);
  const std::vector<EventId> streamed = enqueue(4, 2);
  ids.insert(ids.end(), streamed.begin(), streamed.end());
  ASSERT_TRUE(all_published()) << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("aggregate_sequence BETWEEN 7 AND 8 AND claimed_by IS NOT NULL"), 0)
      << "after the switch back the stream publishes again";
}

// Behind a backlog the stream brings (held in flight by the broker), each sweep of the table path
// visits every pending head and takes none of them, so sweeps are spaced by their cost
// (TableSweep); a row only the table path may take, a failed send's retry (touched by its failure
// record), is still claimed within a few of its polls, while the backlog is out.
TEST_F(CdcRelayTest, BehindABacklogTheStreamBringsATouchedRowIsStillClaimedByTheTablePath) {
  RelayOptions o = cdc_options("sweep");
  o.cdc.table_poll = 10ms;    // a sweep's hold is at most about ten of them
  o.cdc.horizon_grace = 60s;  // however slowly the backlog is written, it stays the stream's
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& broker = *holding;
  Relay relay(o, std::make_unique<FailOnceSink>(std::move(holding), "agg-7", std::int64_t{1}));
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  broker.hold(true);
  const std::vector<EventId> ids = enqueue(2000, 1);
  ASSERT_TRUE(wait_until([&] { return relay.stats().in_flight >= 1999; }, 10s))
      << "in flight " << relay.stats().in_flight << "; " << relay.stats().last_error;
  ASSERT_TRUE(wait_until(
      [&] { return rows("aggregate_id = 'agg-7' AND claimed_by IS NOT NULL") == 1; }, 5s))
      << "the failed send's retry was not claimed by the table path; claim statements "
      << relay.stats().claim_queries << ", in flight " << relay.stats().in_flight;
  EXPECT_GE(relay.stats().in_flight, 1999U) << "the backlog was out all along";
  EXPECT_EQ(rows("aggregate_id <> 'agg-7' AND claimed_by IS NOT NULL"), 0)
      << "the table path took nothing the stream brought";
  broker.hold(false);
  ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
}

// What the stream brings again may be finished or the table's by then (a restart before the slot
// was confirmed; rows the table path published while no slot was there): finished rows are not
// sent again, and a quarantined row is neither sent nor passed by its aggregate's next event.
TEST_F(CdcRelayTest, StreamedRowsThatAreFinishedOrTheTablesAreNotSent) {
  {
    Relay relay(cdc_options("first"), sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
  }  // the slot is confirmed here: what follows is streamed to the next relay
  enqueue(3, 2);
  const std::string events = schema_.table("outbox_events");
  pg::exec(conn(), "UPDATE " + events + " SET published_at = now() WHERE aggregate_sequence = 1");
  pg::exec(conn(), "UPDATE " + events +
                       " SET skipped_at = now() WHERE aggregate_sequence = 2 "
                       "AND aggregate_id = 'agg-1'");
  pg::exec(conn(), "UPDATE " + events +
                       " SET published_at = now() WHERE aggregate_sequence = 2 "
                       "AND aggregate_id = 'agg-2'");
  pg::exec(conn(), "UPDATE " + events +
                       " SET quarantined_at = now(), quarantine_reason = 'test', attempt_count = 1,"
                       " available_at = 'infinity' WHERE aggregate_sequence = 2 AND aggregate_id "
                       "= 'agg-0'");
  const std::vector<EventId> fresh = enqueue(3, 1);  // sequence 3 of each
  Relay relay(cdc_options("second"), sink());
  Running running(relay);
  ASSERT_TRUE(
      wait_until([&] { return rows("published_at IS NULL AND skipped_at IS NULL") == 2; }, 15s))
      << relay.stats().last_error << "; unpublished " << unpublished();
  std::this_thread::sleep_for(1s);  // time to send what it should not
  running.stop();
  EXPECT_EQ(relay.stats().claimed, 2U) << "only agg-1 and agg-2's sequence 3 were sent";
  EXPECT_EQ(relay.stats().published, 2U);
  EXPECT_EQ(rows("published_at IS NULL AND aggregate_id = 'agg-0'"), 2)
      << "the quarantined row and the event behind it wait";
}

// Two shards: each relay streams its aggregates (publication row filters on a hash of the
// aggregate) from its own slot, and only those; together they publish everything, in order.
// Going back to one shard drops the two shard slots (they would hold WAL forever).
TEST_F(CdcRelayTest, ShardsSplitTheAggregatesOverSlotsAndAnotherShardingDropsThem) {
  const std::string base = cdc_options("x").cdc.slot;
  RelayOptions first = cdc_options("shard0");
  first.cdc.shards = 2;
  RelayOptions second = first;
  second.relay_id = "shard1";
  second.cdc.shard = 1;
  std::vector<EventId> ids;
  {
    Relay relay0(first, sink());
    Relay relay1(second, sink());
    Running running0(relay0);
    Running running1(relay1);
    ids = enqueue(20, 3);
    ASSERT_TRUE(all_published()) << unpublished() << " unpublished; " << relay0.stats().last_error
                                 << relay1.stats().last_error;
    running0.stop();
    running1.stop();
    const long long of_shard0 =
        rows("(hashtext(aggregate_type || '/' || aggregate_id) & 2147483647) % 2 = 0");
    EXPECT_GT(of_shard0, 0);
    EXPECT_LT(of_shard0, 60);
    EXPECT_EQ(relay0.stats().published, static_cast<std::uint64_t>(of_shard0))
        << "shard 0 published its aggregates' events and no others";
    EXPECT_EQ(relay1.stats().published, static_cast<std::uint64_t>(60 - of_shard0));
    EXPECT_EQ(rows("claimed_by IS NOT NULL"), 0) << "all of them streamed";
    EXPECT_EQ(count(conn(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2)",
                    {(base + "_0_of_2").c_str(), (base + "_1_of_2").c_str()}),
              2);
  }
  Relay relay(cdc_options("one"), sink());
  Running running(relay);
  const std::vector<EventId> later = enqueue(20, 1);
  ids.insert(ids.end(), later.begin(), later.end());
  ASSERT_TRUE(all_published()) << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM pg_replication_slots WHERE starts_with(slot_name::text, "
                  "$1)",
                  {base.c_str()}),
            1)
      << "one slot: the shard slots were dropped";
}

// --- Table-less producers (ProducerOptions::table_less, CdcOptions::table_less) ---------------

class TableLessTest : public CdcRelayTest {
 protected:
  RelayOptions table_less_options(const std::string& id) {
    RelayOptions o = cdc_options(id);
    o.cdc.table_less = true;
    o.cdc.wal_budget = 0;
    return o;
  }
  // As enqueue(), by a table-less producer: no rows.
  std::vector<EventId> enqueue_table_less(int aggregates, int per_aggregate, int first_k = 0) {
    return enqueue(aggregates, per_aggregate, true, first_k);
  }
  // What a table-less producer's enqueue says now ("" when it worked), its transaction rolled back.
  std::string table_less_refusal() {
    ProducerOptions options{schema_, 4096};
    options.table_less = true;
    pg::exec(conn(), "BEGIN");
    try {
      Producer(options).enqueue(conn(),
                                NewEvent{"order", "refused", "Step", "{}", "{}", 1, std::nullopt});
      pg::exec(conn(), "ROLLBACK");
      return "";
    } catch (const DatabaseError& error) {
      pg::exec(conn(), "ROLLBACK");
      EXPECT_EQ(error.sqlstate(), "55000") << error.what();
      EXPECT_FALSE(error.retryable()) << error.what();
      return error.what();
    }
  }
  // Publishes every event whose id is in `ids` (on the topic), waiting up to 20 s.
  long long table_rows() { return rows("true"); }
  // A row written straight to the table, as a relay writes a table-less event whose send failed
  // or as a caller with ids of its own inserts one: `columns` and `values` add to those every row
  // needs (", name" and ", value").
  void insert_row(const EventId& id, const std::string& aggregate_id, int sequence,
                  const std::string& columns = "", const std::string& values = "") {
    const std::string sequence_text = std::to_string(sequence);
    pg::exec(conn(),
             "INSERT INTO " + schema_.table("outbox_events") +
                 " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, "
                 "schema_version, payload, headers" +
                 columns + ") VALUES ($1, 'order', $2, $3, 'Step', 1, '{}', '{}'" + values + ")",
             {id.to_string().c_str(), aggregate_id.c_str(), sequence_text.c_str()});
  }
  // A table-less relay makes and registers the slot, then stops: what producers write meanwhile
  // waits in the slot for the next one.
  void register_slot_and_stop() {
    Relay first(table_less_options("tl"), sink());
    Running running(first);
    ASSERT_TRUE(wait_until([&] { return first.stats().health == Health::running; }, 10s))
        << first.stats().last_error;
  }
};

// Events that exist only in the WAL reach the broker in order, beside table events of the same
// aggregates, with the payload bytes the table path would send; no row is written for them.
TEST_F(TableLessTest, EventsWithoutRowsArePublishedInOrderBesideTableEvents) {
  EXPECT_NE(table_less_refusal().find("--table-less"), std::string::npos)
      << "no registered slot yet: the producer refuses rather than write events no one reads";
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  EXPECT_EQ(table_less_refusal(), "");
  std::vector<EventId> ids = enqueue_table_less(6, 3);            // k 0..2
  const std::vector<EventId> from_table = enqueue(6, 2);          // sequences 4, 5: rows
  const std::vector<EventId> more = enqueue_table_less(6, 2, 5);  // 6, 7
  ids.insert(ids.end(), from_table.begin(), from_table.end());
  ids.insert(ids.end(), more.begin(), more.end());
  // Several events of one aggregate in one statement: one message, in the order given.
  ProducerOptions options{schema_, 4096};
  options.table_less = true;
  std::vector<NewEvent> batch;
  for (int k = 0; k < 4; ++k) {
    batch.push_back(NewEvent{"order", "agg-batch", "Step",
                             R"({"k":)" + std::to_string(k) + R"(,"a" : [1,2]})", "{}", 1,
                             std::nullopt});
  }
  pg::exec(conn(), "BEGIN");
  for (const EnqueuedEvent& e : Producer(options).enqueue(conn(), batch)) ids.push_back(e.event_id);
  pg::commit(conn());
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s))
      << relay.stats().published << " of " << ids.size() << "; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(table_rows(), static_cast<long long>(from_table.size()))
      << "only the table producer's events have rows";
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(relay.stats().materialized, 0U);
  const auto messages = read_topic_until(
      kafka().bootstrap_servers(), topic_,
      [&](const std::vector<ReadMessage>& so_far) {
        return std::count_if(so_far.begin(), so_far.end(),
                             [](const auto& m) { return m.key == "agg-batch"; }) >= 4;
      },
      20s);
  for (const ReadMessage& m : messages) {
    if (m.key == "agg-batch" && m.headers.at("aggregate_sequence") == "1") {
      EXPECT_EQ(m.value, R"({"a": [1, 2], "k": 0})") << "the payload as jsonb prints it";
    }
  }
}

// A failed send of a table-less event writes it to the table (it had no row), with what waits
// behind it; the relay's own claim retries it, and its aggregate stays in order.
TEST_F(TableLessTest, AFailedEventIsWrittenToTheTableRetriedAndItsAggregateWaitsBehindIt) {
  Relay relay(table_less_options("tl"),
              std::make_unique<FailOnceSink>(sink(), "agg-3", std::int64_t{2}));
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::vector<EventId> ids = enqueue_table_less(6, 5);
  ASSERT_TRUE(
      wait_until([&] { return relay.stats().published >= ids.size() && unpublished() == 0; }, 20s))
      << relay.stats().published << " of " << ids.size() << "; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().failed, 1U);
  EXPECT_GE(relay.stats().materialized, 1U);
  EXPECT_EQ(rows("aggregate_id = 'agg-3' AND aggregate_sequence = 2 AND attempt_count = 1 AND "
                 "published_at IS NOT NULL AND claimed_by IS NOT NULL"),
            1)
      << "the failed event got a row, which the relay's own claim retried";
  EXPECT_EQ(rows("aggregate_id <> 'agg-3'"), 0) << "other aggregates were not held up";
}

// A relay whose stream went may have written a table-less event to the table (its send failed)
// after its predecessor's send went, and before the slot's position moved past either. The next
// stream brings both again: the predecessor goes again (a duplicate, as after any restart), but
// the event whose row is pending is the table's. It is checked, though it follows this stream's
// own send, and goes once, from its row. While the table holds a row, every table-less event is
// checked.
TEST_F(TableLessTest, AnEventAnEarlierStreamWroteToTheTableIsCheckedAndGoesOnce) {
  register_slot_and_stop();
  const std::vector<EventId> ids = enqueue_table_less(1, 3);  // agg-0: 1, 2, 3
  // Event 2's row, as the earlier relay wrote it when its send failed: in its backoff.
  insert_row(ids.at(1), "agg-0", 2, ", occurred_at, available_at, attempt_count",
             ", now() - interval '1 second', now() + interval '1 second', 1");
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(
      wait_until([&] { return relay.stats().published >= ids.size() && unpublished() == 0; }, 20s))
      << relay.stats().published << " of " << ids.size() << "; " << relay.stats().last_error;
  std::this_thread::sleep_for(500ms);  // a second send of event 2 would have gone by now
  EXPECT_EQ(relay.stats().published, ids.size()) << "event 2 from its row only";
  const std::vector<EventId> later = enqueue_table_less(2, 3, 3);  // after the stream started
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size() + later.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  EXPECT_EQ(relay.stats().unchecked, 0U) << "the table holds rows: each one is checked";
  running.stop();
  std::vector<EventId> all = ids;
  all.insert(all.end(), later.begin(), later.end());
  expect_on_broker_in_order(all);
  const auto messages = read_topic_until(
      kafka().bootstrap_servers(), topic_,
      [&](const std::vector<ReadMessage>& so_far) { return so_far.size() >= all.size(); }, 20s);
  EXPECT_EQ(std::count_if(messages.begin(), messages.end(),
                          [&](const ReadMessage& m) {
                            return m.headers.at("event_id") == ids.at(1).to_string();
                          }),
            1)
      << "event 2 once";
}

// In a table that holds no row, a table-less event after its stream's own send goes without the
// check statement (counted unchecked); once the stream brings a row, every one is checked.
TEST_F(TableLessTest, WhileTheTableHoldsNoRowEventsAfterTheStreamsOwnSendGoUnchecked) {
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  std::vector<EventId> ids = enqueue_table_less(2, 3);  // agg-0, agg-1: 1, 2, 3
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  const std::uint64_t unchecked = relay.stats().unchecked;
  EXPECT_GE(unchecked, 2U) << "2 and 3 of each follow its own send (unless the xmin lagged)";
  EXPECT_LE(unchecked, 4U) << "never a first event";
  const std::vector<EventId> row = enqueue(1, 1, false, 3);       // agg-0's 4, a row
  const std::vector<EventId> more = enqueue_table_less(2, 2, 4);  // agg-0: 5, 6; agg-1: 4, 5
  ASSERT_TRUE(wait_until(
      [&] { return relay.stats().published >= ids.size() + row.size() + more.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  EXPECT_LE(relay.stats().unchecked, unchecked + 1)
      << "the table-less ones checked since the stream brought a row (the row itself may go "
         "unchecked: a row after its aggregate's own send)";
  running.stop();
  ids.insert(ids.end(), row.begin(), row.end());
  ids.insert(ids.end(), more.begin(), more.end());
  expect_on_broker_in_order(ids);
}

// As in AnEventAnEarlierStreamWroteToTheTableIsCheckedAndGoesOnce, but the earlier relay's send of
// event 2 failed for good (quarantined), and an operator skipped it while no relay ran: no row is
// pending, and the skip still holds (event 3 goes after it, as after any skip). And a table-less
// event whose id a row of the same transaction reused: the row is what goes, once.
TEST_F(TableLessTest, AnEventAnOperatorSkippedOrARowReusedTheIdOfIsNotSentFromTheStream) {
  register_slot_and_stop();
  const std::vector<EventId> ids = enqueue_table_less(1, 3);  // agg-0: 1, 2, 3
  insert_row(ids.at(1), "agg-0", 2, ", attempt_count, quarantined_at, skipped_at",
             ", 1, now(), now()");
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= 2; }, 20s))
      << relay.stats().last_error;
  std::this_thread::sleep_for(1s);  // a send of event 2 would have gone by now
  EXPECT_EQ(relay.stats().published, 2U) << "events 1 and 3: 2 was skipped";
  // Another aggregate: b#2's id reused by a row producer in the same transaction.
  ProducerOptions options{schema_, 4096};
  options.table_less = true;
  pg::exec(conn(), "BEGIN");
  const EventId b1 =
      Producer(options)
          .enqueue(conn(), NewEvent{"order", "b", "Step", "{}", "{}", 1, std::nullopt})
          .event_id;
  pg::commit(conn());
  const EventId b2 = EventId::generate();
  pg::exec(conn(), "BEGIN");
  Producer(options).enqueue(conn(),
                            NewEvent{"order", "b", "Step", R"({"from":"stream"})", "{}", 1, b2});
  insert_row(b2, "reuser", 1);
  pg::commit(conn());
  ASSERT_TRUE(wait_until(
      [&] {
        return rows("published_at IS NULL AND skipped_at IS NULL") == 0 &&
               relay.stats().published >= 4;
      },
      20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  std::this_thread::sleep_for(500ms);
  running.stop();
  const std::size_t sent = relay.stats().published;  // each one a message on the topic
  const auto messages = read_topic_until(
      kafka().bootstrap_servers(), topic_,
      [&](const std::vector<ReadMessage>& so_far) { return so_far.size() >= sent; }, 20s);
  std::map<std::string, int> seen;
  for (const ReadMessage& m : messages) ++seen[m.headers.at("event_id")];
  EXPECT_EQ(seen[ids.at(1).to_string()], 0) << "skipped";
  EXPECT_EQ(seen[ids.at(2).to_string()], 1);
  EXPECT_EQ(seen[b1.to_string()], 1);
  EXPECT_EQ(seen[b2.to_string()], 1) << "the reused id once";
}

// A transaction too large to hold in memory is written to the table as it is read.
TEST_F(TableLessTest, ATransactionLargerThanTheByteBudgetIsWrittenToTheTable) {
  RelayOptions o = table_less_options("tl");
  o.max_in_flight_bytes = 4096;
  Relay relay(o, sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  ProducerOptions options{schema_, 4096};
  options.table_less = true;
  const Producer producer(options);
  std::vector<EventId> ids;
  pg::exec(conn(), "BEGIN");
  for (int i = 0; i < 100; ++i) {  // ~200 bytes each: five times the budget in one transaction
    ids.push_back(producer
                      .enqueue(conn(), NewEvent{"order", "agg-" + std::to_string(i % 5), "Step",
                                                R"({"k":")" + std::string(180, 'x') + R"("})", "{}",
                                                1, std::nullopt})
                      .event_id);
  }
  pg::commit(conn());
  const std::vector<EventId> after = enqueue_table_less(5, 2);  // behind them, through the stream
  ids.insert(ids.end(), after.begin(), after.end());
  ASSERT_TRUE(
      wait_until([&] { return relay.stats().published >= ids.size() && unpublished() == 0; }, 20s))
      << relay.stats().published << " of " << ids.size() << "; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(rows("aggregate_sequence <= 20 AND claimed_by IS NOT NULL"), 100)
      << "the large transaction's events were written and claimed";
}

// A transaction past the byte budget spills: table-less events read before the row that passed
// the budget are written to the table too (they are nowhere else), and a spilled event of an
// aggregate whose earlier event is still out is not claimed before that one: written untouched,
// it is the table path's only past the stream's horizon, and comes back through the stream
// behind its predecessor.
TEST_F(TableLessTest, ASpillKeepsEveryTableLessEventAndTheirAggregatesOrder) {
  RelayOptions o = table_less_options("tl");
  o.max_in_flight_bytes = 4096;
  Relay relay(o, std::make_unique<SlowFailOnceSink>(sink(), "agg-0", std::int64_t{1}, 5s));
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  // The large transaction begins first, more than the grace (1 s) before agg-0 #1 commits: its
  // events' now() is then older than the horizon that #1's transaction holds.
  pg::exec(conn(), "BEGIN");
  std::this_thread::sleep_for(1500ms);
  auto other = connect();
  ProducerOptions less{schema_, 4096};
  less.table_less = true;
  const Producer table_less(less);
  const Producer with_rows(ProducerOptions{schema_, 4096});
  pg::exec(other.get(), "BEGIN");
  std::vector<EventId> ids{
      // agg-0 #1: held 5 s, then fails
      table_less
          .enqueue(other.get(), NewEvent{"order", "agg-0", "Step", "{}", "{}", 1, std::nullopt})
          .event_id};
  pg::commit(other.get());
  ASSERT_TRUE(wait_until([&] { return relay.stats().in_flight == 1; }, 10s));
  for (int i = 0; i < 4; ++i) {  // agg-0 #2..#5, read before the rows below pass the budget
    ids.push_back(table_less
                      .enqueue(conn(), NewEvent{"order", "agg-0", "Step", R"({"k":1})", "{}", 1,
                                                std::nullopt})
                      .event_id);
  }
  for (int i = 0; i < 40; ++i) {  // ~200 bytes each: twice the budget, as rows
    ids.push_back(with_rows
                      .enqueue(conn(), NewEvent{"order", "agg-" + std::to_string(1 + i % 3), "Step",
                                                R"({"k":")" + std::string(180, 'x') + R"("})", "{}",
                                                1, std::nullopt})
                      .event_id);
  }
  pg::commit(conn());
  ASSERT_TRUE(
      wait_until([&] { return relay.stats().published >= ids.size() && unpublished() == 0; }, 30s))
      << relay.stats().published << " of " << ids.size() << "; " << relay.stats().last_error;
  EXPECT_EQ(relay.stats().failed, 1U) << "#1 was still out when the large transaction was read";
  // Again with nothing in flight and nothing after it: no failure or later candidate makes the
  // relay look at what the spill left, only the spill itself (or the position it would report).
  pg::exec(conn(), "BEGIN");
  for (int i = 0; i < 4; ++i) {
    ids.push_back(table_less
                      .enqueue(conn(), NewEvent{"order", "agg-9", "Step", R"({"k":1})", "{}", 1,
                                                std::nullopt})
                      .event_id);
  }
  for (int i = 0; i < 40; ++i) {
    ids.push_back(with_rows
                      .enqueue(conn(), NewEvent{"order", "agg-" + std::to_string(1 + i % 3), "Step",
                                                R"({"k":")" + std::string(180, 'x') + R"("})", "{}",
                                                1, std::nullopt})
                      .event_id);
  }
  pg::commit(conn());
  ASSERT_TRUE(
      wait_until([&] { return relay.stats().published >= ids.size() && unpublished() == 0; }, 30s))
      << relay.stats().published << " of " << ids.size() << "; " << relay.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().failed, 1U);
  EXPECT_GE(relay.stats().materialized, 8U) << "agg-0 #2..#5 and agg-9 #1..#4 went to the table";
}

// Nothing keeps a table-less producer from reusing an event id (no primary key sees it). The
// relay publishes the first and not the second, and its position moves on: the book counts
// events by id, and a second open event of one id would hold the slot's position for good.
TEST_F(TableLessTest, AReusedEventIdIsPublishedOnceAndThePositionMovesOn) {
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  ProducerOptions options{schema_, 4096};
  options.table_less = true;
  const Producer producer(options);
  const EventId reused = EventId::generate();
  pg::exec(conn(), "BEGIN");
  producer.enqueue(conn(), NewEvent{"order", "first", "Step", "{}", "{}", 1, reused});
  producer.enqueue(conn(), NewEvent{"order", "second", "Step", "{}", "{}", 1, reused});
  pg::commit(conn());
  const std::string after = wal_now();
  const std::vector<EventId> later = enqueue_table_less(3, 2);
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= later.size() + 1; }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  EXPECT_TRUE(slot_confirmed_past(after))
      << "the slot's position moves past the transaction with the reused id";
  running.stop();
  std::vector<EventId> ids = later;
  ids.push_back(reused);
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().published, later.size() + 1) << "the reused id once";
}

// A message with the outbox prefix that is not an outbox producer's (any role may emit one) is
// skipped with an error, whatever it holds: not JSON, numbers out of range, an xid that is not
// its transaction's (it would wait for that one's visibility, holding the slot's position, for
// good). The position moves past it and the events after it go.
TEST_F(TableLessTest, MessagesThatAreNotAProducersAreSkippedAndThePositionMovesOn) {
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::string prefix = schema_.message_prefix();
  const std::string event = R"("events": [{"event_id": "0192f1d2-0000-7000-8000-000000000001",)"
                            R"( "sequence": 1, "event_type": "E", "schema_version": 1,)"
                            R"( "payload": "{}", "headers": "{}"}])";
  for (
      const std::string& body :
      {std::string("not json"),
       R"({"xid": "99999999999", "occurred_at": "2026-01-01T00:00:00Z", "aggregate_type": "o",)"
       R"( "aggregate_id": "x", )" +
           event + "}",
       std::string(
           R"({"xid": "XID", "occurred_at": "2026-01-01T00:00:00Z", "aggregate_type": "o",)"
           R"( "aggregate_id": "x", "events": [{"event_id": "0192f1d2-0000-7000-8000-000000000002",)"
           R"( "sequence": 1e300, "event_type": "E", "schema_version": 1,)"
           R"( "payload": "{}", "headers": "{}"}]})"),
       std::string(
           R"({"xid": "XID", "occurred_at": "2026-01-01T00:00:00Z", "aggregate_type": "o",)"
           R"( "aggregate_id": "x", "events": [{"event_id": "0192f1d2-0000-7000-8000-000000000003",)"
           R"( "sequence": 1, "event_type": "E", "schema_version": 1,)"
           R"( "payload": "{not json", "headers": "{}"}]})")}) {
    pg::exec(conn(), "BEGIN");
    const std::string xid(pg::exec(conn(), "SELECT pg_current_xact_id()::text").text(0, 0));
    std::string text = body;
    if (const auto at = text.find("XID"); at != std::string::npos) text.replace(at, 3, xid);
    pg::exec(conn(), "SELECT pg_logical_emit_message(true, $1, $2)",
             {prefix.c_str(), text.c_str()});
    pg::commit(conn());
  }
  const std::string after = wal_now();
  const std::vector<EventId> ids = enqueue_table_less(2, 2);
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  EXPECT_TRUE(slot_confirmed_past(after));
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().published, ids.size()) << "none of the four was sent";
  EXPECT_EQ(table_rows(), 0) << "nor written to the table";
}

// After a crash PostgreSQL restarts a slot at its last saved position; table-less events it
// brings again have no row to say they went. The relay saved its confirmed position with its
// registration (durably), and a new relay starts there: nothing is published twice.
TEST_F(TableLessTest, AfterAPostgresCrashANewRelayStartsFromTheSavedPositionNotTheSlots) {
  const std::string registration = schema_.table("outbox_table_less_slots");
  std::vector<EventId> ids;
  std::string after;
  {
    Relay relay(table_less_options("tl-1"), sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    pg::exec(conn(), "CHECKPOINT");  // the slot saved as it is now, before the events
    ids = enqueue_table_less(4, 3);
    after = wal_now();
    ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s));
    ASSERT_TRUE(wait_until(
        [&] {
          return count(
                     conn(),
                     "SELECT count(*) FROM " + registration + " WHERE confirmed_lsn >= $1::pg_lsn",
                     {after.c_str()}) == 1;
        },
        10s))
        << "the relay saves its confirmed position within a second or two";
  }
  postgres().restart_immediate();
  connection_ = connect();
  const std::string slot = cdc_options("x").cdc.slot;
  if (count(conn(),
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND "
            "confirmed_flush_lsn < $2::pg_lsn",
            {slot.c_str(), after.c_str()}) != 1) {
    GTEST_SKIP() << "the slot was saved past the events before the crash: nothing to show";
  }
  Relay relay(table_less_options("tl-2"), sink());
  Running running(relay);
  const std::vector<EventId> later = enqueue_table_less(1, 1, 10);
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= later.size(); }, 20s))
      << relay.stats().last_error;
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(relay.stats().published, later.size())
      << "the slot's older position would have brought the first relay's events again";
  running.stop();
  ids.insert(ids.end(), later.begin(), later.end());
  expect_on_broker_in_order(ids);
}

// Nothing silent: a relay without --table-less refuses a registered slot, and stops at a
// table-less event on its own slot (which keeps it); a lost slot makes producers refuse.
// Issue 23, item 2: PostgreSQL lets every role call pg_logical_emit_message, and a role with no
// right on the outbox schema made a table-less relay publish a payment of its choosing on
// outbox.payment, with real outbox headers. A message is published only when its transaction
// moved its aggregate's counter to its last sequence first (what only a producer may do); the
// forged one is counted and logged, and the relay goes on.
TEST_F(TableLessTest, AMessageEmittedByARoleThatCannotProduceIsNotPublished) {
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
      << relay.stats().last_error;
  const std::string forger = schema_.name() + "_forger";
  pg::exec(conn(), "DROP ROLE IF EXISTS " + forger);
  pg::exec(conn(), "CREATE ROLE " + forger + " LOGIN");
  const std::string forge =
      "SELECT pg_logical_emit_message(true, $1, json_build_object('xid', "
      "pg_current_xact_id()::text, 'occurred_at', to_json(now())#>>'{}', 'aggregate_type', "
      "'payment', 'aggregate_id', 'acct-42', 'events', json_build_array(json_build_object("
      "'event_id', gen_random_uuid(), 'sequence', $2::bigint, 'event_type', 'PaymentApproved', "
      "'schema_version', 1, 'payload', '{\"amount_cents\":100000000}', 'headers', "
      "'{}')))::text)";
  const std::string prefix = schema_.message_prefix();
  pg::exec(conn(), "BEGIN");
  pg::exec(conn(), "SET LOCAL ROLE " + forger);
  pg::exec(conn(), forge, {prefix.c_str(), "7"});
  pg::commit(conn());
  // The forger cannot write the counter to make it look like a producer's.
  pg::exec(conn(), "BEGIN");
  pg::exec(conn(), "SET LOCAL ROLE " + forger);
  try {
    pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_aggregate_sequences") +
                         " VALUES ('payment', 'acct-42', 1)");
    ADD_FAILURE() << "a role without rights wrote a counter";
  } catch (const DatabaseError& error) {
    EXPECT_EQ(error.sqlstate(), "42501") << error.what();
  }
  pg::exec(conn(), "ROLLBACK");
  // A counter moved in another transaction proves nothing for this one.
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_aggregate_sequences") +
                       " VALUES ('payment', 'acct-43', 1)");
  pg::exec(conn(), "BEGIN");
  pg::exec(conn(), "SET LOCAL ROLE " + forger);
  pg::exec(conn(), forge, {prefix.c_str(), "1"});
  pg::commit(conn());
  const std::string after = wal_now();
  const std::vector<EventId> ids = enqueue_table_less(2, 2);
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  EXPECT_TRUE(slot_confirmed_past(after));
  EXPECT_EQ(relay.stats().messages_rejected, 2U);
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().published, ids.size()) << "the forged payments were not sent";
  pg::exec(conn(), "DROP ROLE " + forger);
}

// A table-less slot from before the witness publication (made by an earlier version) holds WAL
// that PostgreSQL 15 cannot decode with a publication created since: the relay reads it without
// the witness (its messages taken as before), then streams with the witness from there on.
TEST_F(TableLessTest, ASlotFromBeforeTheWitnessIsReadAsBeforeThenWithTheWitness) {
  const std::string slot = table_less_options("x").cdc.slot;
  pg::exec(conn(), "CREATE PUBLICATION \"" + schema_.name() + "_outbox\" FOR TABLE " +
                       schema_.table("outbox_events") + " WITH (publish = 'insert')");
  pg::exec(conn(), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {slot.c_str()});
  pg::exec(conn(),
           "INSERT INTO " + schema_.table("outbox_table_less_slots") +
               " (slot_name, relay_id) VALUES ($1, 'an-earlier-version')",
           {slot.c_str()});
  std::vector<EventId> ids = enqueue_table_less(3, 2);
  Relay relay(table_less_options("tl"), sink());
  Running running(relay);
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  const std::vector<EventId> later = enqueue_table_less(3, 2, 2);
  pg::exec(conn(),
           "SELECT pg_logical_emit_message(true, $1, json_build_object('xid', "
           "pg_current_xact_id()::text, 'occurred_at', '2026-01-01T00:00:00Z', "
           "'aggregate_type', 'order', 'aggregate_id', 'agg-0', 'events', "
           "json_build_array(json_build_object('event_id', gen_random_uuid(), "
           "'sequence', 5, 'event_type', 'Step', 'schema_version', 1, 'payload', '{}', "
           "'headers', '{}')))::text)",
           {schema_.message_prefix().c_str()});
  const std::vector<EventId> last = enqueue_table_less(3, 1, 5);
  ids.insert(ids.end(), later.begin(), later.end());
  ids.insert(ids.end(), last.begin(), last.end());
  ASSERT_TRUE(wait_until([&] { return relay.stats().published >= ids.size(); }, 20s))
      << relay.stats().published << "; " << relay.stats().last_error;
  EXPECT_EQ(relay.stats().messages_rejected, 1U) << "the forged one, after the old WAL";
  running.stop();
  expect_on_broker_in_order(ids);
  EXPECT_EQ(relay.stats().published, ids.size());
}

// A companion publication made by hand without updates would make every message of an aggregate
// that had a counter already look forged, and table-less events have no other copy: refused.
TEST_F(TableLessTest, AWitnessPublicationThatLeavesUpdatesOutIsRefused) {
  const std::string witness = schema_.name() + "_outbox_seq";
  pg::exec(conn(), "CREATE PUBLICATION \"" + witness + "\" FOR TABLE " +
                       schema_.table("outbox_aggregate_sequences") + " WITH (publish = 'insert')");
  try {
    Relay relay(table_less_options("tl"), sink());
    ADD_FAILURE() << "a table-less relay took a witness publication without updates";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("must publish inserts and updates"), std::string::npos)
        << error.what();
  }
  pg::exec(conn(), "DROP PUBLICATION \"" + witness + "\"");
}

// A switch to table-less while a relay without it streams the slot: once the slot is registered
// (by a table-less relay waiting as its standby, here by hand), producers write table-less
// events; the relay without it must not confirm past them. It stops as it would at start, and
// the table-less relay publishes them.
TEST_F(TableLessTest, ARelayWithoutItStopsWhenItsSlotIsRegisteredMeanwhileAndLosesNothing) {
  RelayOptions plain = cdc_options("plain");
  std::vector<EventId> ids;
  std::string before;
  {
    Relay relay(plain, sink());
    std::string stopped_with;
    std::thread thread([&] {
      try {
        relay.run();
      } catch (const std::exception& error) {
        stopped_with = error.what();
      }
    });
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    pg::exec(conn(),
             "INSERT INTO " + schema_.table("outbox_table_less_slots") +
                 " (slot_name, relay_id) VALUES ($1, 'switching')",
             {plain.cdc.slot.c_str()});
    before = wal_now();
    ids = enqueue_table_less(2, 2);
    EXPECT_TRUE(wait_until([&] { return relay.stats().health == Health::stopped; }, 10s));
    relay.request_stop();
    thread.join();
    EXPECT_NE(stopped_with.find("was registered for table-less events"), std::string::npos)
        << stopped_with;
    EXPECT_EQ(relay.stats().published, 0U);
    EXPECT_EQ(relay.stats().messages_rejected, 0U);
  }
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND "
                  "confirmed_flush_lsn > $2::pg_lsn",
                  {plain.cdc.slot.c_str(), before.c_str()}),
            0)
      << "the slot was confirmed past the table-less events";
  Relay table_less(table_less_options("tl"), sink());
  Running running(table_less);
  ASSERT_TRUE(wait_until([&] { return table_less.stats().published == ids.size(); }, 20s))
      << table_less.stats().last_error;
  running.stop();
  expect_on_broker_in_order(ids);
}

// Issue 23, item 3: the same message at a relay without --table-less stopped it ("a table-less
// event"), on every restart, since the slot keeps the message: any login could stop every CDC
// relay for good. It is skipped, counted and logged; the relay goes on.
TEST_F(TableLessTest, RelaysWithoutItRefuseASlotForItAndSkipTableLessMessagesElsewhere) {
  {
    Relay registering(table_less_options("tl-1"), sink());  // registers the slot
  }
  try {
    Relay relay(cdc_options("plain"), sink());
    FAIL() << "a relay without table_less took a registered slot";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("--table-less"), std::string::npos) << error.what();
  }
  // Another slot, not registered: the relay streams, skips table-less messages (counted) and
  // goes on publishing rows.
  RelayOptions plain = cdc_options("plain");
  plain.cdc.slot += "_plain";
  std::vector<EventId> ids;
  {
    Relay relay(plain, sink());
    Running running(relay);
    ASSERT_TRUE(wait_until([&] { return relay.stats().health == Health::running; }, 10s))
        << relay.stats().last_error;
    ids = enqueue_table_less(2, 2);
    pg::exec(conn(), "SELECT pg_logical_emit_message(true, $1, 'x')",
             {schema_.message_prefix().c_str()});
    pg::exec(conn(), "BEGIN");
    Producer(ProducerOptions{schema_, 4096})
        .enqueue(conn(), NewEvent{"order", "a-row", "Step", "{}", "{}", 1, std::nullopt});
    pg::commit(conn());
    ASSERT_TRUE(wait_until([&] { return relay.stats().published >= 1; }, 20s))
        << relay.stats().last_error;
    EXPECT_GE(relay.stats().messages_rejected, 3U);
    EXPECT_EQ(relay.stats().health, Health::running);
    EXPECT_EQ(relay.stats().published, 1U) << "no table-less event from this slot";
  }
  // The registered slot kept them: a table-less relay publishes them.
  {
    Relay table_less(table_less_options("tl-2"), sink());
    Running running(table_less);
    ASSERT_TRUE(wait_until([&] { return table_less.stats().published == ids.size(); }, 20s))
        << table_less.stats().last_error;
  }
  expect_on_broker_in_order(ids);
  // The slot is lost (dropped here, as an operator or a failover would): producers refuse.
  const std::string slot = cdc_options("x").cdc.slot;
  for (const std::string& name : {slot, plain.cdc.slot}) {
    EXPECT_TRUE(wait_until(  // once the relay's walsender has gone
        [&] {
          try {
            pg::exec(conn(), "SELECT pg_drop_replication_slot($1)", {name.c_str()});
            return true;
          } catch (const DatabaseError&) {
            return false;
          }
        },
        10s))
        << name;
  }
  // Within a second: a session that passed the check looks again only in the next second.
  EXPECT_TRUE(wait_until(
      [&] { return table_less_refusal().find("would be lost") != std::string::npos; }, 3s));
  // The relay creates it again (saying what was lost); producers write again.
  Relay again(table_less_options("tl-3"), sink());
  Running running(again);
  ASSERT_TRUE(wait_until([&] { return again.stats().health == Health::running; }, 10s));
  EXPECT_EQ(table_less_refusal(), "");
}

}  // namespace
}  // namespace outbox::testing
