#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/fault.hpp"
#include "outbox/kafka.hpp"
#include "outbox/producer.hpp"
#include "outbox/relay.hpp"
#include "support/claim_plan.hpp"
#include "support/kafka_reader.hpp"
#include "support/relay_fixture.hpp"
#include "support/test_env.hpp"
#include "support/test_sinks.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

// Watches every send of every relay sharing it. A violation is: the same event in flight twice,
// two events of one aggregate in flight at once, or a send of sequence k+1 before k was
// acknowledged.
class InFlightTracker {
 public:
  void on_send(const Event& e) {
    std::lock_guard lock(mutex_);
    const std::string aggregate = e.aggregate_type + "/" + e.aggregate_id;
    if (!events_.insert(e.event_id).second) violation("event in flight twice", e);
    if (!aggregates_.insert(aggregate).second) violation("aggregate in flight twice", e);
    if (e.aggregate_sequence > acknowledged_[aggregate] + 1) violation("sent ahead of order", e);
  }
  void on_report(const Event& e, DeliveryOutcome outcome) {
    std::lock_guard lock(mutex_);
    const std::string aggregate = e.aggregate_type + "/" + e.aggregate_id;
    events_.erase(e.event_id);
    aggregates_.erase(aggregate);
    if (outcome == DeliveryOutcome::published) {
      auto& last = acknowledged_[aggregate];
      last = std::max(last, e.aggregate_sequence);
    }
  }
  std::vector<std::string> violations() {
    std::lock_guard lock(mutex_);
    return violations_;
  }

 private:
  void violation(const std::string& what, const Event& e) {
    violations_.push_back(what + ": " + e.aggregate_id + " #" +
                          std::to_string(e.aggregate_sequence));
  }
  std::mutex mutex_;
  std::set<EventId> events_;
  std::set<std::string> aggregates_;
  std::map<std::string, std::int64_t> acknowledged_;
  std::vector<std::string> violations_;
};

class TrackingSink final : public Sink {
 public:
  TrackingSink(std::unique_ptr<Sink> inner, InFlightTracker& tracker)
      : inner_(std::move(inner)), tracker_(tracker) {}
  void send(const Event& event, std::uint64_t ticket) override {
    tracker_.on_send(event);
    sent_[ticket] = event;
    inner_->send(event, ticket);
  }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    const std::size_t before = reports.size();
    inner_->poll(max_wait, reports);
    for (std::size_t i = before; i < reports.size(); ++i) {
      tracker_.on_report(sent_.at(reports[i].ticket), reports[i].outcome);
      sent_.erase(reports[i].ticket);
    }
  }
  [[nodiscard]] std::size_t in_flight() const override { return inner_->in_flight(); }
  [[nodiscard]] std::string describe() const override { return "tracking " + inner_->describe(); }

 private:
  std::unique_ptr<Sink> inner_;
  InFlightTracker& tracker_;
  std::map<std::uint64_t, Event> sent_;
};

// Calls `at_limit` once, on the `limit`-th send.
class CountingSink final : public Sink {
 public:
  CountingSink(std::unique_ptr<Sink> inner, int limit, std::function<void()> at_limit)
      : inner_(std::move(inner)), limit_(limit), at_limit_(std::move(at_limit)) {}
  void send(const Event& event, std::uint64_t ticket) override {
    inner_->send(event, ticket);
    if (++sent_ == limit_) at_limit_();
  }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    inner_->poll(max_wait, reports);
  }
  [[nodiscard]] std::size_t in_flight() const override { return inner_->in_flight(); }
  [[nodiscard]] std::string describe() const override { return "counting " + inner_->describe(); }

 private:
  std::unique_ptr<Sink> inner_;
  int limit_;
  int sent_ = 0;
  std::function<void()> at_limit_;
};

using RelayTest = RelayFixture;

TEST_F(RelayTest, PublishesEveryCommittedEventInAggregateOrderAndMarksIt) {
  const auto ids = enqueue(10, 20);
  Relay relay(options("r1"), sink());
  ASSERT_TRUE(relay.run_until_idle(60s));
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(relay.stats().published, ids.size());
  EXPECT_EQ(relay.stats().fenced, 0U);
  expect_on_broker_in_order(ids);
}

TEST_F(RelayTest, RollbackNeverReachesTheBroker) {
  const Producer producer(ProducerOptions{schema_, 4096});
  pg::exec(conn(), "BEGIN");
  const auto ghost = producer.enqueue(conn(), NewEvent{"order", "g", "Step", "{}", "{}", 1, {}});
  pg::exec(conn(), "ROLLBACK");
  const auto ids = enqueue(1, 1);
  Relay relay(options("r1"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  const auto messages = read_topic(kafka().bootstrap_servers(), topic_, 2, 3s);
  ASSERT_EQ(messages.size(), 1U);
  EXPECT_EQ(messages[0].headers.at("event_id"), ids[0].to_string());
  EXPECT_NE(messages[0].headers.at("event_id"), ghost.event_id.to_string());
}

TEST_F(RelayTest, EveryIntentIsPublishedAfterARelayRestart) {
  auto ids = enqueue(5, 40);
  {
    auto o = options("first");
    o.batch_size = 10;
    o.max_in_flight = 10;
    // Stopped part-way, as by a restart: after its 30th send (a timer raced the relay's speed).
    Relay* to_stop = nullptr;
    auto counting = std::make_unique<CountingSink>(sink(), 30, [&] { to_stop->request_stop(); });
    Relay first(o, std::move(counting));
    to_stop = &first;
    first.run();
  }
  EXPECT_GT(unpublished(), 0) << "the first relay was meant to stop before the end";
  const auto more = enqueue(5, 5);
  ids.insert(ids.end(), more.begin(), more.end());
  Relay second(options("second"), sink());
  ASSERT_TRUE(second.run_until_idle(60s));
  EXPECT_EQ(unpublished(), 0);
  expect_on_broker_in_order(ids);
}

// A relay that claimed rows and died holds them only until its lease runs out.
TEST_F(RelayTest, AnExpiredLeaseIsTakenOverByAnotherRelay) {
  const auto ids = enqueue(3, 1);
  // The lease runs from the UPDATE, so the time it must hold is counted from there: counted from
  // after the relay's construction (connect, Kafka client), a slow start (ThreadSanitizer on a
  // loaded machine: about 0.3 s) ate into it and a relay that waited out the lease looked early.
  const auto started = std::chrono::steady_clock::now();
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'dead-relay:1', claim_until = now() + interval '1.5 s'");
  Relay relay(options("survivor"), sink());
  relay.run_until_idle(500ms);
  EXPECT_EQ(unpublished(), 3) << "rows under a live lease must not be taken";
  while (unpublished() > 0 && std::chrono::steady_clock::now() - started < 20s) {
    relay.run_until_idle(500ms);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(unpublished(), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1400ms);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE claimed_by LIKE 'survivor:%'"),
            3);
  expect_on_broker_in_order(ids);
}

// A relay whose rows were re-claimed by another while its sends were in flight must not mark
// them: its completion is fenced and counted.
TEST_F(RelayTest, ACompletionForARowClaimedByAnotherRelayIsFenced) {
  enqueue(4, 1);
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_rtt(broker, 1500);
  Relay stale(options("stale"), sink());
  std::thread runner([&] { stale.run(); });
  // Wait for the claim, then play the other relay that took the rows after a lease expiry.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                           " WHERE claimed_by LIKE 'stale:%'") < 4 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'newer:1', claim_until = now() + interval '1 min'");
  while (stale.stats().fenced < 4 && std::chrono::steady_clock::now() < deadline + 10s) {
    std::this_thread::sleep_for(50ms);
  }
  stale.request_stop();
  runner.join();
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_rtt(broker, 0);
  EXPECT_EQ(stale.stats().fenced, 4U);
  EXPECT_EQ(stale.stats().published, 0U);
  EXPECT_EQ(unpublished(), 4) << "a fenced relay must not mark rows published";
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE claimed_by = 'newer:1'"),
            4);
}

TEST_F(RelayTest, TwoRelaysNeverShareARowNorInvertAnAggregate) {
  const auto ids = enqueue(20, 30);
  InFlightTracker tracker;
  auto o = options("a");
  o.batch_size = 5;     // small claims and a small window, so one relay cannot hold every
  o.max_in_flight = 5;  // aggregate (a mark passes an aggregate on to its own next claim)
  Relay a(o, std::make_unique<TrackingSink>(sink(), tracker));
  o.relay_id = "b";
  Relay b(o, std::make_unique<TrackingSink>(sink(), tracker));
  std::thread ta([&] { a.run(); });
  std::thread tb([&] { b.run(); });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (unpublished() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  a.request_stop();
  b.request_stop();
  ta.join();
  tb.join();
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(tracker.violations(), std::vector<std::string>{});
  EXPECT_GT(a.stats().published, 0U);
  EXPECT_GT(b.stats().published, 0U) << "both relays should have done part of the work";
  EXPECT_EQ(a.stats().published + b.stats().published, ids.size());
  expect_on_broker_in_order(ids);
}

// All brokers down longer than the producer's message timeout: sends fail, rows back off and
// keep their order, and everything is delivered once the brokers are back.
TEST_F(RelayTest, ABrokerOutageBacksOffThenDelivers) {
  const auto ids = enqueue(3, 3);
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_down(broker, true);
  auto o = options("patient");
  o.backoff_base = 200ms;
  o.backoff_max = 1s;
  Relay relay(o, sink({{"message.timeout.ms", "800"}}));
  std::thread runner([&] { relay.run(); });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (relay.stats().failed < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(unpublished(), 9);
  EXPECT_GT(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE attempt_count > 0 AND last_error IS NOT NULL"),
            0);
  EXPECT_EQ(relay.stats().health, Health::broker_unavailable);
  EXPECT_NE(relay.stats().last_error.find("timed out"), std::string::npos)
      << relay.stats().last_error;
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_down(broker, false);
  while (unpublished() > 0 && std::chrono::steady_clock::now() < deadline + 20s) {
    std::this_thread::sleep_for(100ms);
  }
  relay.request_stop();
  runner.join();
  EXPECT_EQ(unpublished(), 0);
  EXPECT_GE(relay.stats().failed, 3U);
  EXPECT_EQ(relay.stats().health, Health::stopped);
  expect_on_broker_in_order(ids);
}

// PostgreSQL crashes while sends are in flight and stays down while their acks arrive. The relay
// reports the outage, keeps the acks, reconnects, writes them, and publishes the rest: every event
// reaches the broker exactly once (no lease had to expire, so nothing was sent twice).
TEST_F(RelayTest, SurvivesAPostgresCrashAndKeepsTheAcksItCollectedMeanwhile) {
  const auto ids = enqueue(20, 5);
  auto o = options("survivor");
  o.reconnect_backoff_base = 50ms;
  o.reconnect_backoff_max = 200ms;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay relay(o, std::move(holding));
  std::thread runner([&] { relay.run(); });
  // The first claim takes the 20 heads; their acks are held back.
  ASSERT_TRUE(wait_until([&] { return held.held() == 20; }, 20s)) << held.held();
  // The relay commits its claims asynchronously; a checkpoint flushes the WAL up to here, so the
  // crash below keeps the claim (losing it would be a fenced mark and a republish, also correct,
  // but not what this test looks at). A transaction that writes no WAL of its own would not do.
  pg::exec(conn(), "CHECKPOINT");
  postgres().stop_immediate();
  const bool noticed =
      wait_until([&] { return relay.stats().health == Health::database_unavailable; }, 10s);
  held.release();  // the acks arrive while PostgreSQL is down
  const bool taken_while_down = wait_until([&] { return relay.stats().in_flight == 0; }, 5s);
  postgres().start_again();
  EXPECT_TRUE(taken_while_down) << "the relay should take broker reports during the outage";
  EXPECT_TRUE(noticed) << to_string(relay.stats().health);
  connection_ = connect();
  EXPECT_TRUE(wait_until([&] { return unpublished() == 0; }, 30s)) << unpublished();
  relay.request_stop();
  runner.join();
  const RelayStats stats = relay.stats();
  EXPECT_GE(stats.reconnects, 1U);
  EXPECT_EQ(stats.fenced, 0U);
  EXPECT_EQ(stats.published, ids.size());
  EXPECT_FALSE(stats.last_error.empty());
  expect_on_broker_in_order(ids);
  std::map<std::string, int> copies;
  for (const auto& m : read_whole_topic(kafka().bootstrap_servers(), topic_, 20s)) {
    ++copies[m.headers.at("event_id")];
  }
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id << " published " << n << " times";
}

// While acks do not come (a stalled broker) an awake relay looks for new rows every 80 ms instead
// of every 10 ms (re-walking its own leased heads 100 times a second), and still finds a row
// committed meanwhile by itself (producers do not notify an awake relay).
TEST_F(RelayTest, AnAwakeRelayWaitingOnAcksBacksOffItsOwnLookingButStillFindsNewRows) {
  auto ids = enqueue(3, 1);
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay relay(options("waiting"), std::move(holding));
  std::thread runner([&] { relay.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 3; }, 20s)) << held.held();
  const std::uint64_t before = relay.stats().claim_queries;
  std::this_thread::sleep_for(1s);
  const std::uint64_t looked = relay.stats().claim_queries - before;
  EXPECT_LE(looked, 40U) << "an awake relay waiting on acks claimed " << looked
                         << " times in a second (at a fixed 10 ms it would be ~100)";
  EXPECT_GE(looked, 5U) << "it must keep looking while awake";

  // A new aggregate (the held ones' successors would wait for their acks).
  const Producer producer(ProducerOptions{schema_, 4096});
  pg::exec(conn(), "BEGIN");
  ids.push_back(
      producer.enqueue(conn(), NewEvent{"order", "fresh", "Step", "{}", "{}", 1, std::nullopt})
          .event_id);
  pg::commit(conn());
  EXPECT_TRUE(wait_until([&] { return held.held() == 4; }, 2s))
      << "the row committed meanwhile was not sent: " << held.held();
  held.release();
  EXPECT_TRUE(wait_until([&] { return unpublished() == 0; }, 20s)) << unpublished();
  relay.request_stop();
  runner.join();
  expect_on_broker_in_order(ids);
}

TEST_F(RelayTest, AFailedSendIsRescheduledWithBackoffAndItsSuccessorWaits) {
  enqueue(1, 2);
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_down(broker, true);
  auto o = options("r");
  o.backoff_base = 10s;
  Relay relay(o, sink({{"message.timeout.ms", "300"}}));
  relay.run_until_idle(5s);
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_down(broker, false);
  const auto rows =
      pg::exec(conn(),
               "SELECT aggregate_sequence, attempt_count, last_error,"
               " available_at > now() + interval '4 s', quarantined_at IS NULL FROM " +
                   schema_.table("outbox_events") + " ORDER BY aggregate_sequence");
  ASSERT_EQ(rows.rows(), 2);
  EXPECT_EQ(rows.int64(0, 1), 1);
  EXPECT_NE(std::string(rows.text(0, 2)).find("timed out"), std::string::npos) << rows.text(0, 2);
  EXPECT_EQ(rows.text(0, 3), "t") << "the retry must wait at least half the base backoff";
  EXPECT_EQ(rows.text(0, 4), "t") << "a retryable failure must not quarantine";
  EXPECT_EQ(rows.int64(1, 1), 0) << "the next sequence must not be tried while the head fails";
  EXPECT_EQ(relay.stats().claimed, 1U);
}

TEST_F(RelayTest, StopDrainsInFlightSendsAndExitsCleanly) {
  enqueue(10, 10);
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_rtt(broker, 300);
  Relay relay(options("draining"), sink());
  std::thread runner([&] { relay.run(); });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (relay.stats().in_flight == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  const auto in_flight = relay.stats().in_flight;
  relay.request_stop();
  runner.join();
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_rtt(broker, 0);
  EXPECT_GT(in_flight, 0U);
  EXPECT_EQ(relay.stats().in_flight, 0U) << "stop must wait for the reports of what was sent";
  EXPECT_EQ(relay.stats().published, relay.stats().claimed);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE published_at IS NULL AND claim_until IS NOT NULL"),
            0)
      << "no row may stay leased after a clean stop";
}

// A relay that fell behind must not slow down the further it falls: the claim visits one entry
// per aggregate, however many events wait behind each head. Counted in rows the plan touched
// (EXPLAIN ANALYZE), which is deterministic, not in seconds. (The first form of this claim
// chose a plan that read the whole backlog once per head under the crash campaign.)
TEST_F(RelayTest, AClaimReadsTheHeadsNotTheBacklog) {
  pg::exec(conn(), "ALTER TABLE " + schema_.table("outbox_events") +
                       " SET (autovacuum_enabled = false)");  // no statistics, as in the field
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_events") +
                       " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                       "  payload) SELECT gen_random_uuid(), 'order', 'hot-' || a, s, 'Step', '{}'"
                       " FROM generate_series(1, 1000) a, generate_series(1, 30) s");
  // Published history and a few leased heads, as a relay that fell behind sees the table.
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'other:1', claim_until = now() + interval '1 min'"
                       " WHERE aggregate_sequence = 1 AND aggregate_id < 'hot-2'");
  // No ANALYZE: a backlog that built up moments ago has no statistics yet, and that is where
  // the planner once chose to read the whole table per head.
  const long long touched = claim_plan_rows(conn(), schema_, 500);
  EXPECT_LT(touched, 20000) << "the claim read the backlog";
}

// The mark statement fails as if the connection broke (a retryable DatabaseError just before it):
// the relay keeps the acks, recovers, and writes them; nothing is published twice.
TEST_F(RelayTest, AFailedMarkIsWrittenAgainNotRepublished) {
  const auto ids = enqueue(5, 2);
  fault::arm("relay.after_ack_before_mark=dberror@1");
  auto o = options("remarker");
  o.reconnect_backoff_base = 20ms;
  o.reconnect_backoff_max = 50ms;
  Relay relay(o, sink());
  const bool idle = relay.run_until_idle(30s);
  fault::arm("");
  EXPECT_TRUE(idle);
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(relay.stats().reconnects, 1U);
  EXPECT_EQ(relay.stats().fenced, 0U);
  std::map<std::string, int> copies;
  for (const auto& m : read_whole_topic(kafka().bootstrap_servers(), topic_, 20s)) {
    ++copies[m.headers.at("event_id")];
  }
  EXPECT_EQ(copies.size(), ids.size());
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id << " published " << n << " times";
}

// The mark updates by ctid. A row that another transaction changed after the mark's snapshot
// (here: a row lock the mark waits on, then a change that keeps our claim, as an earlier try of
// the same mark on a lost connection would make) is still ours and must be marked, not fenced and
// published again after the lease.
TEST_F(RelayTest, AMarkThatWaitedForAConcurrentChangeStillMarksItsRow) {
  const auto ids = enqueue(1, 1);
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay relay(options("racer"), std::move(holding));
  std::thread runner([&] { relay.run(); });
  const bool sent = wait_until([&] { return held.held() == 1; }, 20s);
  auto other = connect();
  pg::exec(other.get(), "BEGIN");
  pg::exec(other.get(),
           "UPDATE " + schema_.table("outbox_events") +
               " SET last_error = 'touched' WHERE event_id = $1",
           {ids.front().to_string().c_str()});
  held.release();  // the mark now waits for our row lock
  std::this_thread::sleep_for(500ms);
  pg::commit(other.get());
  const bool published = wait_until([&] { return unpublished() == 0; }, 5s);
  relay.request_stop();
  runner.join();
  ASSERT_TRUE(sent);
  EXPECT_TRUE(published) << "the mark should find the row's newest version";
  EXPECT_EQ(relay.stats().fenced, 0U) << "the row was never re-claimed";
  EXPECT_EQ(relay.stats().published, 1U);
}

// NOTIFY costs producers a database-wide lock through their commit, so they notify only when a
// relay waits for it: some relay listens and none is awake (outbox_relays, rows younger than 30 s).
// What a listener receives per enqueue, by the relays' state:
TEST_F(RelayTest, ProducersNotifyOnlyWhenARelayListensAndNoneIsAwake) {
  auto listener = connect();
  listener.listen('"' + schema_.notify_channel() + '"');
  const std::string relays = schema_.table("outbox_relays");
  int raw = 0;
  // The producer's statement decides by itself (migration 7); any other writer's insert goes
  // through the table's trigger (migration 6). Both must agree in every state.
  const std::vector<std::pair<std::string, std::function<void()>>> writers = {
      {"producer", [&] { enqueue(1, 1); }},
      {"plain INSERT", [&] {
         pg::exec(conn(),
                  "INSERT INTO " + schema_.table("outbox_events") +
                      " (event_id, aggregate_type, aggregate_id, aggregate_sequence,"
                      " event_type, payload) VALUES (gen_random_uuid(), 'order', 'raw-' ||"
                      " $1, 1, 'Imported', '{}')",
                  {std::to_string(++raw).c_str()});
       }}};
  for (const auto& [writer, write] : writers) {
    pg::exec(conn(), "DELETE FROM " + relays);
    auto notified_after = [&] {
      listener.wait_for_notifications(0ms);  // drop anything earlier
      write();
      return listener.wait_for_notifications(300ms) > 0;
    };
    EXPECT_FALSE(notified_after()) << writer << ": no relay runs, nobody to wake";
    pg::exec(conn(), "INSERT INTO " + relays + " VALUES ('a', false, now())");
    EXPECT_FALSE(notified_after()) << writer << ": a relay is awake and looks by itself";
    pg::exec(conn(), "UPDATE " + relays + " SET listening = true");
    EXPECT_TRUE(notified_after()) << writer << ": every relay waits for a NOTIFY";
    pg::exec(conn(), "INSERT INTO " + relays + " VALUES ('b', false, now())");
    EXPECT_FALSE(notified_after()) << writer << ": one listens, another is awake and looks";
    pg::exec(conn(),
             "UPDATE " + relays + " SET seen_at = now() - interval '1 min' WHERE relay_id = 'b'");
    EXPECT_TRUE(notified_after()) << writer << ": an awake relay that stopped beating is gone";
    pg::exec(conn(), "UPDATE " + relays + " SET seen_at = now() - interval '1 min'");
    EXPECT_FALSE(notified_after()) << writer << ": a listening relay that stopped beating too";
  }
}

// The producer's statement makes the wake-up check itself (migration 7), so the table's PL/pgSQL
// trigger does not run for it; rows other writers insert still go through the trigger and wake a
// listening relay, also in a transaction where a producer enqueued into another schema.
TEST_F(RelayTest, TheTriggerWakesRelaysForOtherWritersAndSkipsTheProducer) {
  auto listener = connect();
  listener.listen('"' + schema_.notify_channel() + '"');
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_relays") + " VALUES ('a', true, now())");
  pg::exec(conn(), "SET track_functions = 'pl'");
  const std::string trigger_calls =
      "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
      " WHERE schemaname = '" +
      schema_.name() + "' AND funcname = 'outbox_events_notify'";
  const std::string raw_insert =
      "INSERT INTO " + schema_.table("outbox_events") +
      " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, payload)"
      " VALUES (gen_random_uuid(), 'order', 'raw-' || $1, 1, 'Imported', '{}')";
  const Producer producer(ProducerOptions{schema_, 4096});
  const SchemaName other_schema("relay_trigger_other");
  pg::exec(conn(), "SET client_min_messages = warning");
  pg::exec(conn(), "DROP SCHEMA IF EXISTS " + other_schema.quoted() + " CASCADE");
  migrate(conn(), other_schema);
  const Producer other(ProducerOptions{other_schema, 4096});

  // PL/pgSQL calls of the trigger function during `statements` (the view also shows calls of
  // earlier transactions not yet flushed to the statistics, hence the difference).
  auto trigger_runs = [&](const std::function<void()>& statements) {
    pg::exec(conn(), "BEGIN");
    const long long before = count(conn(), trigger_calls);
    statements();
    const long long runs = count(conn(), trigger_calls) - before;
    listener.wait_for_notifications(0ms);
    pg::commit(conn());
    return runs;
  };
  EXPECT_EQ(
      trigger_runs([&] {
        producer.enqueue(conn(), NewEvent{"order", "p1", "Placed", "{}", "{}", 1, std::nullopt});
        pg::exec(conn(), raw_insert, {"1"});  // decided already in this transaction
      }),
      0)
      << "the producer decided; the trigger skips itself";
  EXPECT_GT(listener.wait_for_notifications(300ms), 0) << "a listening relay is woken";
  EXPECT_EQ(trigger_runs([&] { pg::exec(conn(), raw_insert, {"2"}); }), 1)
      << "another writer's insert runs the trigger";
  EXPECT_GT(listener.wait_for_notifications(300ms), 0) << "and wakes the listening relay";
  EXPECT_EQ(trigger_runs([&] {
              other.enqueue(conn(), NewEvent{"order", "p2", "Placed", "{}", "{}", 1, std::nullopt});
              pg::exec(conn(), raw_insert, {"3"});
            }),
            1)
      << "a decision for another schema does not count for this one";
  EXPECT_GT(listener.wait_for_notifications(300ms), 0);
  pg::exec(conn(), "DROP SCHEMA " + other_schema.quoted() + " CASCADE");
}

// Options that could not work are refused up front, naming the option.
TEST_F(RelayTest, RefusesOptionsThatCannotWork) {
  auto refusal = [&](const std::function<void(RelayOptions&)>& change) -> std::string {
    RelayOptions o = options("refused");
    change(o);
    try {
      Relay relay(o, sink());
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal([](RelayOptions& o) { o.batch_size = 0; }).find("batch_size"),
            std::string::npos);
  EXPECT_NE(refusal([](RelayOptions& o) { o.max_in_flight = 0; }).find("max_in_flight"),
            std::string::npos);
  EXPECT_NE(refusal([](RelayOptions& o) { o.max_attempts = -1; }).find("max_attempts"),
            std::string::npos);
  EXPECT_NE(refusal([](RelayOptions& o) { o.max_in_flight_bytes = 0; }).find("max_in_flight_bytes"),
            std::string::npos);
  EXPECT_NE(refusal([](RelayOptions& o) { o.lease = 50ms; }).find("lease"), std::string::npos);
  EXPECT_NE(refusal([](RelayOptions& o) { o.idle_poll_max = 0ms; }).find("idle_poll_max"),
            std::string::npos);
  EXPECT_NE(refusal([](RelayOptions& o) { o.idle_poll_max = -5ms; }).find("idle_poll_max"),
            std::string::npos);
  EXPECT_EQ(refusal([](RelayOptions& o) { o.idle_poll_max = 2ms; }), "") << "the shortest allowed";
}

// A relay started while PostgreSQL is down (a service coming up beside its database) does not
// fail: it says database_unavailable, keeps trying with its reconnect backoff, and publishes once
// the server is back. The library does this, not each caller.
TEST_F(RelayTest, StartsWhilePostgresIsDownAndPublishesOnceItIsBack) {
  const auto ids = enqueue(3, 2);
  postgres().stop_immediate();
  auto o = options("early");
  o.reconnect_backoff_base = 50ms;
  o.reconnect_backoff_max = 200ms;
  std::unique_ptr<Relay> relay;
  ASSERT_NO_THROW(relay = std::make_unique<Relay>(o, sink()));
  EXPECT_EQ(relay->stats().health, Health::database_unavailable);
  EXPECT_FALSE(relay->stats().last_error.empty());
  std::thread runner([&] { relay->run(); });
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(relay->stats().health, Health::database_unavailable) << "no server, no progress";
  postgres().start_again();
  connection_ = connect();
  const bool published = wait_until([&] { return unpublished() == 0; }, 30s);
  relay->request_stop();
  runner.join();
  EXPECT_TRUE(published) << unpublished() << " unpublished";
  EXPECT_EQ(relay->stats().published, ids.size());
  expect_on_broker_in_order(ids);
}

// A relay whose first connection cannot succeed by retrying (a database that does not exist) is
// refused at once, not retried forever.
TEST_F(RelayTest, AFirstConnectionNoRetryCanFixIsThrown) {
  auto o = options("misdirected");
  o.database_url = database_url() + " dbname=no_such_database";
  EXPECT_THROW({ Relay relay(o, sink()); }, DatabaseError);
}

// A schema one migration short of what this relay needs (the session-lock columns) is refused
// when the relay starts, saying which version it found and what to run, not at its first
// registration with a missing column.
TEST_F(RelayTest, RefusesASchemaOlderThanItNeedsAndSaysToMigrate) {
  // This build's relays need version 17 (polling_source.cpp, check_schema: 12 records a
  // session's backend, 14 where a table-less slot's proof begins, 15 the slot a session streams,
  // 17 what it published).
  constexpr int kRelayNeeds = 17;
  pg::exec(conn(), fmt::format("DELETE FROM {} WHERE version >= {}",
                               schema_.table("outbox_schema_migrations"), kRelayNeeds));
  try {
    Relay relay(options("too-new"), sink());
    FAIL() << "a relay started against schema version " << kRelayNeeds - 1;
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fmt::format("at version {}", kRelayNeeds - 1)), std::string::npos)
        << message;
    EXPECT_NE(message.find("outbox migrate"), std::string::npos) << message;
  }
}

// Under steady traffic a relay stays awake between events (it finds them by itself within a few
// milliseconds), instead of asking producers to notify it after every event: a producer that saw
// it awake sends no NOTIFY and would wait for the idle timer. It listens once traffic stops.
TEST_F(RelayTest, ARelayStaysAwakeBetweenEventsOfSteadyTrafficAndListensAfterIt) {
  Relay relay(options("steady"), sink());
  std::thread runner([&] { relay.run(); });
  const std::string listening_sql = "SELECT count(*) FROM " + schema_.table("outbox_relays") +
                                    " WHERE relay_id LIKE 'steady:%' AND listening";
  auto watcher = connect();
  const bool slept_first =
      wait_until([&] { return count(watcher.get(), listening_sql) == 1; }, 10s);
  enqueue(1, 1);  // wakes it (NOTIFY)
  wait_until([&] { return count(watcher.get(), listening_sql) == 0; }, 5s);
  int asleep_during_traffic = 0;
  for (int i = 0; i < 30; ++i) {  // an event every ~20 ms for ~0.6 s
    enqueue(1, 1);
    const auto until = std::chrono::steady_clock::now() + 20ms;
    while (std::chrono::steady_clock::now() < until) {
      asleep_during_traffic += static_cast<int>(count(watcher.get(), listening_sql));
      std::this_thread::sleep_for(2ms);
    }
  }
  const bool drained = wait_until([&] { return unpublished() == 0; }, 5s);
  const bool slept_after = wait_until([&] { return count(watcher.get(), listening_sql) == 1; }, 5s);
  relay.request_stop();
  runner.join();
  ASSERT_TRUE(slept_first) << "an idle relay should listen";
  EXPECT_EQ(asleep_during_traffic, 0) << "samples that found the relay listening mid-traffic";
  EXPECT_TRUE(drained);
  EXPECT_TRUE(slept_after) << "once traffic stops the relay should listen again";
}

// Heavy live traffic (here 4,000 events in commits of 10, ~2,000-3,000 events/s) paces the
// relay's claims at least 3 ms apart, so each finds a batch worth a statement; unpaced, every
// broker report (every millisecond or two) brought a claim of a few rows.
TEST_F(RelayTest, UnderHeavyTrafficClaimsArePacedNotOnePerBrokerReport) {
  Relay relay(options("paced"), sink({{"linger.ms", "0.5"}}));
  std::thread runner([&] { relay.run(); });
  std::vector<EventId> ids = enqueue(10, 1);
  const bool warm = wait_until([&] { return unpublished() == 0; }, 10s);
  const auto claims_before = relay.stats().claim_queries;
  const auto started = std::chrono::steady_clock::now();
  const Producer producer(ProducerOptions{schema_, 4096});
  for (int i = 0; i < 400; ++i) {  // new aggregates, as orders being placed
    pg::exec(conn(), "BEGIN");
    for (int a = 0; a < 10; ++a) {
      ids.push_back(
          producer
              .enqueue(conn(), NewEvent{"order", "o-" + std::to_string(i) + "-" + std::to_string(a),
                                        "Step", "{}", "{}", 1, std::nullopt})
              .event_id);
    }
    pg::commit(conn());
    std::this_thread::sleep_for(2ms);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto claims = relay.stats().claim_queries - claims_before;
  const bool drained = wait_until([&] { return unpublished() == 0; }, 10s);
  relay.request_stop();
  runner.join();
  ASSERT_TRUE(warm);
  EXPECT_TRUE(drained);
  // At most one claim per 3 ms, plus slack for the claims that are never paced (a NOTIFY, a
  // full batch of 50) and for the traffic's first claims.
  EXPECT_LE(static_cast<double>(claims), seconds / 0.003 * 1.1 + 20)
      << claims << " claims in " << seconds << " s of traffic";
  expect_on_broker_in_order(ids);
}

// A sleeping relay beats like an awake one (every 10 s), or producers would take it for dead
// after 30 s and stop waking it.
TEST_F(RelayTest, AListeningRelayKeepsItsRowFresh) {
  auto o = options("dozer");
  o.idle_poll_max = 20s;
  Relay relay(o, sink());
  std::thread runner([&] { relay.run(); });
  // The listening row's heartbeat in ms, 0 while there is none.
  const std::string seen_sql =
      "SELECT coalesce(max((extract(epoch FROM seen_at) * 1000)::bigint), 0) FROM " +
      schema_.table("outbox_relays") + " WHERE relay_id LIKE 'dozer:%' AND listening";
  const bool listening = wait_until([&] { return count(conn(), seen_sql) > 0; }, 10s);
  const long long first_seen = count(conn(), seen_sql);
  const bool beat = wait_until([&] { return count(conn(), seen_sql) > first_seen; }, 15s);
  const auto ids = enqueue(1, 1);
  const bool published = wait_until([&] { return unpublished() == 0; }, 1500ms);
  relay.request_stop();
  runner.join();
  ASSERT_TRUE(listening) << "an idle relay should record that it waits for a NOTIFY";
  EXPECT_TRUE(beat) << "a listening relay should refresh seen_at within its 10 s heartbeat";
  EXPECT_TRUE(published) << "the commit's NOTIFY should still wake it";
  expect_on_broker_in_order(ids);
}

// A relay with nothing to do says so and sleeps; the next commit wakes it at once (the idle timer
// here is far longer than the wait allowed). Stopping removes its row.
TEST_F(RelayTest, AnIdleRelayListensAndIsWokenByTheNextCommit) {
  auto o = options("sleeper");
  o.idle_poll_max = 20s;
  Relay relay(o, sink());
  std::thread runner([&] { relay.run(); });
  const std::string state_sql = "SELECT count(*) FROM " + schema_.table("outbox_relays") +
                                " WHERE relay_id LIKE 'sleeper:%' AND listening";
  const bool listening = wait_until([&] { return count(conn(), state_sql) == 1; }, 10s);
  std::this_thread::sleep_for(1500ms);  // past the idle timer's first steps
  const auto ids = enqueue(1, 1);
  const auto committed = std::chrono::steady_clock::now();
  const bool published = wait_until([&] { return unpublished() == 0; }, 5s);
  const auto took = std::chrono::steady_clock::now() - committed;
  relay.request_stop();
  runner.join();
  EXPECT_TRUE(listening) << "an idle relay should record that it waits for a NOTIFY";
  EXPECT_TRUE(published);
  EXPECT_LT(took, 1500ms) << "the commit's NOTIFY should wake the sleeping relay";
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_relays")), 0)
      << "a stopped relay removes its row";
  expect_on_broker_in_order(ids);
}

// Marking an event published claims its successor in the same statement, so an aggregate's events
// follow each other one round trip apart, without waiting for a claim to find the new head.
TEST_F(RelayTest, AMarkClaimsTheNextEventOfItsAggregate) {
  const auto ids = enqueue(1, 8);
  InFlightTracker tracker;
  Relay relay(options("chain"), std::make_unique<TrackingSink>(sink(), tracker));
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(relay.stats().published, 8U);
  EXPECT_EQ(relay.stats().successors, 7U) << "the first event is claimed, the marks claim the rest";
  EXPECT_EQ(relay.stats().mark_queries, 8U) << "one mark per ack: each event waits for the last";
  EXPECT_EQ(tracker.violations(), std::vector<std::string>{});
  expect_on_broker_in_order(ids);
}

}  // namespace
}  // namespace outbox::testing
