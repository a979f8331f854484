#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "outbox/inbox_admin.hpp"
#include "outbox/kafka.hpp"
#include "support/kafka_reader.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

class KafkaConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = fresh_schema();
    topic_ = "consumer." + schema_.name();
    kafka().create_topic(topic_, 2, 1);
    pg::exec(conn(), "CREATE TABLE " + schema_.table("applied") +
                         " (event_id uuid NOT NULL, sequence bigint NOT NULL)");
  }

  std::map<std::string, std::string> headers(const EventId& id, int sequence) {
    return {{"event_id", id.to_string()},
            {"event_type", "Step"},
            {"aggregate_type", "order"},
            {"aggregate_sequence", std::to_string(sequence)},
            {"schema_version", "1"}};
  }

  KafkaConsumerOptions options(const std::string& group) {
    KafkaConsumerOptions o;
    o.brokers = kafka().bootstrap_servers();
    o.group_id = group;
    o.topics = {topic_};
    o.database_url = database_url();
    o.schema = schema_;
    o.consumer_name = "projection";
    // A successor in the same group waits for the predecessor's session to time out on the mock
    // cluster; keep that short.
    o.properties = {{"session.timeout.ms", "3000"}, {"heartbeat.interval.ms", "500"}};
    return o;
  }

  KafkaInboxConsumer::Effect record(const EventId* fail_on = nullptr) {
    return [this, fail_on](PGconn* c, const ConsumedEvent& e) {
      if (fail_on != nullptr && e.event_id == *fail_on) throw std::runtime_error("effect failed");
      pg::exec(c, "INSERT INTO " + schema_.table("applied") + " VALUES ($1, $2)",
               {e.event_id.to_string().c_str(), std::to_string(e.aggregate_sequence).c_str()});
    };
  }

  // Polls until `done` or 20 s.
  template <typename Done>
  void poll_until(KafkaInboxConsumer& consumer, Done done) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!done() && std::chrono::steady_clock::now() < deadline) consumer.poll(100ms);
  }

  // Waits up to 30 s for `condition`.
  template <typename Condition>
  static bool wait_until(Condition condition) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }

  // `n` messages with sequences 1..n over `keys` keys, straight onto the topic.
  std::vector<EventId> produce(int n, int keys) {
    std::vector<EventId> ids;
    for (int i = 1; i <= n; ++i) {
      ids.push_back(EventId::generate());
      produce_raw(kafka().bootstrap_servers(), topic_, "o" + std::to_string(i % keys), "{}",
                  headers(ids.back(), i));
    }
    return ids;
  }

  // options(group) with a short retry backoff, for the run() tests.
  KafkaConsumerOptions retrying(const std::string& group, std::chrono::milliseconds base,
                                std::chrono::milliseconds max) {
    KafkaConsumerOptions o = options(group);
    o.retry_backoff_base = base;
    o.retry_backoff_max = max;
    return o;
  }

  // consumer.run() on its own thread until stop() (or destruction); remembers whether it threw.
  class Running {
   public:
    explicit Running(KafkaInboxConsumer& consumer)
        : consumer_(consumer), thread_([this] {
            try {
              consumer_.run();
            } catch (const std::exception&) {
              threw_ = true;
            }
          }) {}
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;
    ~Running() { stop(); }
    void stop() {
      if (!thread_.joinable()) return;
      consumer_.request_stop();
      thread_.join();
    }
    [[nodiscard]] bool threw() const { return threw_; }

   private:
    KafkaInboxConsumer& consumer_;
    std::atomic<bool> threw_{false};
    std::thread thread_;
  };

  long long distinct_applied() {
    return count(conn(), "SELECT count(DISTINCT event_id) FROM " + schema_.table("applied"));
  }
  long long applied() { return count(conn(), "SELECT count(*) FROM " + schema_.table("applied")); }
  PGconn* conn() { return connection_.get(); }
  pg::Connection connection_ = connect();
  SchemaName schema_;
  std::string topic_;
};

TEST_F(KafkaConsumerTest, ARedeliveredMessageIsANoOp) {
  const EventId id = EventId::generate();
  for (int i = 0; i < 3; ++i)
    produce_raw(kafka().bootstrap_servers(), topic_, "o1", "{}", headers(id, 1));
  KafkaInboxConsumer consumer(options("dup"), record());
  poll_until(consumer, [&] { return consumer.stats().received >= 3; });
  EXPECT_EQ(consumer.stats().applied, 1U);
  EXPECT_EQ(consumer.stats().duplicates, 2U);
  EXPECT_EQ(applied(), 1);
}

TEST_F(KafkaConsumerTest, AMessageWithoutAnEventIdIsSkippedAndCounted) {
  produce_raw(kafka().bootstrap_servers(), topic_, "o1", "{}", {{"event_type", "Step"}});
  const EventId id = EventId::generate();
  produce_raw(kafka().bootstrap_servers(), topic_, "o1", "{}", headers(id, 1));
  KafkaInboxConsumer consumer(options("reject"), record());
  poll_until(consumer, [&] { return consumer.stats().received >= 2; });
  EXPECT_EQ(consumer.stats().rejected, 1U);
  EXPECT_EQ(consumer.stats().applied, 1U);
  EXPECT_EQ(applied(), 1);
}

// The offset moves only after the inbox transaction committed: a failed effect is delivered
// again, to this consumer (it rewinds) and to a successor in the same group.
TEST_F(KafkaConsumerTest, AFailedEffectIsRedeliveredAndNothingAfterItIsSkipped) {
  std::vector<EventId> ids;
  for (int i = 1; i <= 3; ++i) {
    ids.push_back(EventId::generate());
    produce_raw(kafka().bootstrap_servers(), topic_, "o1", "{}", headers(ids.back(), i));
  }
  {
    KafkaInboxConsumer failing(options("redeliver"), record(&ids[1]));
    bool threw = false;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!threw && std::chrono::steady_clock::now() < deadline) {
      try {
        failing.poll(100ms);
      } catch (const std::runtime_error&) {
        threw = true;
      }
    }
    ASSERT_TRUE(threw);
    // Message 1 commits alone or rolls back with the failing batch, depending on what one poll got.
    EXPECT_LE(applied(), 1);
    // Polling on after the failure must not run past the failed message.
    for (int i = 0; i < 5; ++i) {
      try {
        failing.poll(100ms);
      } catch (const std::runtime_error&) {
      }
    }
    EXPECT_EQ(
        count(conn(), "SELECT count(*) FROM " + schema_.table("applied") + " WHERE event_id = $1",
              {ids[2].to_string().c_str()}),
        0)
        << "message 3 was applied past the failed message 2";
  }
  KafkaInboxConsumer successor(options("redeliver"), record());
  poll_until(successor, [&] { return applied() >= 3; });
  EXPECT_EQ(applied(), 3) << "successor received " << successor.stats().received;
  EXPECT_EQ(count(conn(), "SELECT count(DISTINCT event_id) FROM " + schema_.table("applied")), 3);
}

// run() retries a batch whose effect throws, with backoff, reports it, and applies each message
// once when the effect starts to work.
// The gap-aware inbox under a real consumer: an aggregate's events arrive 1, 3, 2 (as after a
// repartitioning, or a replay of 2), and 4 can never be applied. 3 is held until 2 applies;
// 4 is parked after two failures and its aggregate waits while another flows; an operator's
// skip, carried out by the running consumer, clears it.
TEST_F(KafkaConsumerTest, AGapAwareConsumerAppliesInOrderAndParksWhatKeepsFailing) {
  pg::exec(conn(), "CREATE TABLE " + schema_.table("effects") +
                       " (n bigserial, aggregate_id text, sequence bigint)");
  std::vector<EventId> ids;
  const auto send = [&](const std::string& key, int sequence) {
    ids.push_back(EventId::generate());
    produce_raw(kafka().bootstrap_servers(), topic_, key, "{}", headers(ids.back(), sequence));
    return ids.back();
  };
  send("o1", 1);
  send("o1", 3);
  send("o1", 2);
  const EventId poison = send("o1", 4);
  send("o1", 5);
  send("o2", 1);
  send("o2", 2);
  KafkaConsumerOptions o = retrying("ordered", 20ms, 100ms);
  o.ordering.enabled = true;
  o.ordering.park_failing_after = 2;
  KafkaInboxConsumer consumer(o, [&](PGconn* c, const ConsumedEvent& e) {
    if (e.event_id == poison) throw std::runtime_error("cannot apply this one");
    pg::exec(
        c, "INSERT INTO " + schema_.table("effects") + " (aggregate_id, sequence) VALUES ($1, $2)",
        {e.aggregate_id.c_str(), std::to_string(e.aggregate_sequence).c_str()});
  });
  Running running(consumer);
  const auto effects = [&](const char* aggregate) {
    const auto rows = pg::exec(conn(),
                               "SELECT string_agg(sequence::text, ' ' ORDER BY n) FROM " +
                                   schema_.table("effects") + " WHERE aggregate_id = $1",
                               {aggregate});
    return std::string(rows.text(0, 0));
  };
  // o1 and o2 may sit on different partitions, and 4 and 5 may come in different polls: o2's
  // events and the hold of 5 can land after the batch that parked 4, and the gauges are
  // refreshed once a second. Wait for the whole state, then say which part is missing.
  EXPECT_TRUE(wait_until([&] {
    return consumer.stats().events_parked == 1 && consumer.stats().events_waiting == 1 &&
           effects("o2") == "1 2";
  })) << "parked "
      << consumer.stats().events_parked << ", waiting " << consumer.stats().events_waiting;
  EXPECT_EQ(effects("o1"), "1 2 3");
  EXPECT_EQ(effects("o2"), "1 2");
  EXPECT_GE(consumer.stats().held, 1U);
  EXPECT_EQ(consumer.stats().effects_parked, 1U);
  EXPECT_EQ(consumer.stats().events_waiting, 1U);  // 5, behind the parked 4
  decide_held(conn(), schema_, "projection", poison, HeldDecision::skip, "test", "poison");
  EXPECT_TRUE(wait_until([&] { return consumer.stats().decisions_carried_out == 1; }));
  EXPECT_TRUE(wait_until([&] { return consumer.stats().events_parked == 0; }));
  running.stop();
  EXPECT_FALSE(running.threw());
  EXPECT_EQ(effects("o1"), "1 2 3 5");
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("inbox_parked")), 0);
}

// Old events replayed through a consumer whose effect is written for version 3: each v1 and v2
// payload is upcast before the effect sees it. A v4 event, newer than the consumer knows, is
// parked with its aggregate's later event held behind it; a consumer that knows v4 is deployed
// and an operator releases it.
TEST_F(KafkaConsumerTest, OldVersionsAreUpcastAndANewerOneIsParkedUntilAConsumerKnowsIt) {
  pg::exec(conn(), "CREATE TABLE " + schema_.table("effects") +
                       " (n bigserial, aggregate_id text, sequence bigint, payload text)");
  std::vector<std::pair<int, std::string>> versions = {
      {1, R"({"total":1})"},
      {2, R"({"amount":2})"},
      {3, R"({"amount":3,"currency":"USD"})"},
      {4, R"({"amount":{"value":4,"currency":"EUR"}})"},
      {3, R"({"amount":5,"currency":"USD"})"}};
  EventId newer;
  for (std::size_t i = 0; i < versions.size(); ++i) {
    auto h = headers(EventId::generate(), static_cast<int>(i + 1));
    h["event_type"] = "OrderPlaced";
    h["schema_version"] = std::to_string(versions[i].first);
    if (versions[i].first == 4) newer = *EventId::parse(h["event_id"]);
    produce_raw(kafka().bootstrap_servers(), topic_, "o1", versions[i].second, h);
  }
  const auto v1_to_v2 = [](std::string_view p) {
    std::string s(p);
    return s.replace(s.find("total"), 5, "amount");
  };
  const auto v2_to_v3 = [](std::string_view p) {
    std::string s(p);
    return s.insert(s.size() - 1, R"(,"currency":"EUR")");
  };
  KafkaConsumerOptions o = retrying("upcast", 20ms, 100ms);
  o.ordering.enabled = true;
  o.upcasters.add("OrderPlaced", 1, v1_to_v2).add("OrderPlaced", 2, v2_to_v3);
  const auto effect = [&](PGconn* c, const ConsumedEvent& e) {
    ASSERT_EQ(e.schema_version, e.event_id == newer ? 4 : 3);
    pg::exec(
        c,
        "INSERT INTO " + schema_.table("effects") +
            " (aggregate_id, sequence, payload) VALUES ($1, $2, $3)",
        {e.aggregate_id.c_str(), std::to_string(e.aggregate_sequence).c_str(), e.payload.c_str()});
  };
  const auto payloads = [&] {
    const auto rows = pg::exec(conn(),
                               "SELECT coalesce(string_agg(payload, ' ' ORDER BY n), '') "
                               "FROM " +
                                   schema_.table("effects"));
    return std::string(rows.text(0, 0));
  };
  {
    KafkaInboxConsumer consumer(o, effect);
    Running running(consumer);
    EXPECT_TRUE(wait_until([&] { return consumer.stats().events_parked == 1; }));
    EXPECT_TRUE(wait_until([&] { return consumer.stats().events_waiting == 1; }));
    running.stop();
  }
  EXPECT_EQ(payloads(), R"({"amount":1,"currency":"EUR"} {"amount":2,"currency":"EUR"} )"
                        R"({"amount":3,"currency":"USD"})");
  const auto held = list_held(conn(), schema_, "projection");
  ASSERT_EQ(held.size(), 2U);
  EXPECT_EQ(held[0].kind, "unknown_version");
  EXPECT_EQ(held[0].reason,
            "schema_version 4 of OrderPlaced is newer than this consumer knows (3): deploy a "
            "consumer that knows it, then `outbox inbox release` the event");
  // The next release of the service knows version 4 (its effect reads v4; 3 -> 4 nests amount).
  o.upcasters.add("OrderPlaced", 3, [](std::string_view p) {
    nlohmann::json v3 = nlohmann::json::parse(p);
    return nlohmann::json{{"amount", {{"value", v3["amount"]}, {"currency", v3["currency"]}}}}
        .dump();
  });
  decide_held(conn(), schema_, "projection", newer, HeldDecision::release, "ops", "v4 deployed");
  KafkaInboxConsumer upgraded(o, [&](PGconn* c, const ConsumedEvent& e) {
    EXPECT_EQ(e.schema_version, 4);
    pg::exec(
        c,
        "INSERT INTO " + schema_.table("effects") +
            " (aggregate_id, sequence, payload) VALUES ($1, $2, $3)",
        {e.aggregate_id.c_str(), std::to_string(e.aggregate_sequence).c_str(), e.payload.c_str()});
  });
  Running running(upgraded);
  EXPECT_TRUE(wait_until([&] { return upgraded.stats().decisions_carried_out == 1; }));
  running.stop();
  EXPECT_EQ(payloads(), R"({"amount":1,"currency":"EUR"} {"amount":2,"currency":"EUR"} )"
                        R"({"amount":3,"currency":"USD"} {"amount":{"value":4,"currency":"EUR"}} )"
                        R"({"amount":{"currency":"USD","value":5}})");
}

TEST_F(KafkaConsumerTest, RunRetriesAFailingEffectAndReportsIt) {
  const auto ids = produce(5, 1);
  const auto o = retrying("retrying", 20ms, 100ms);
  std::atomic<int> failures_left{3};
  std::atomic<bool> saw_effect_failing{false};
  std::vector<std::chrono::steady_clock::time_point> attempts;  // of ids[2]; the run thread only
  const auto inner = record();
  KafkaInboxConsumer consumer(o, [&](PGconn* c, const ConsumedEvent& e) {
    if (e.event_id == ids[2]) attempts.push_back(std::chrono::steady_clock::now());
    if (e.event_id == ids[2] && failures_left.fetch_sub(1) > 0) {
      throw std::runtime_error("effect failed on purpose");
    }
    inner(c, e);
  });
  Running running(consumer);
  const bool done = wait_until([&] {
    if (consumer.stats().health == Health::effect_failing) saw_effect_failing = true;
    return applied() == 5;
  });
  running.stop();
  EXPECT_TRUE(done) << applied();
  const KafkaConsumerStats stats = consumer.stats();
  EXPECT_EQ(stats.failed_batches, 3U);
  EXPECT_EQ(stats.effect_failures, 3U);  // every failed batch failed in the effect
  EXPECT_EQ(stats.applied, 5U);
  EXPECT_TRUE(saw_effect_failing);
  EXPECT_NE(stats.last_error.find("effect failed on purpose"), std::string::npos)
      << stats.last_error;
  EXPECT_EQ(stats.health, Health::stopped);
  EXPECT_EQ(distinct_applied(), 5);
  // Backoff with equal jitter: the n-th retry waits at least half of base * 2^(n-1).
  ASSERT_EQ(attempts.size(), 4U);
  for (std::size_t n = 1; n < attempts.size(); ++n) {
    const auto gap = attempts[n] - attempts[n - 1];
    EXPECT_GE(gap, o.retry_backoff_base * (1 << (n - 1)) / 2) << "retry " << n << " came too soon";
  }
}

// PostgreSQL crashes in the middle of a batch. run() reports the outage, reconnects when the
// server is back, and applies every message exactly once.
TEST_F(KafkaConsumerTest, RunSurvivesAPostgresCrashMidBatch) {
  produce(40, 4);
  const auto o = retrying("crash", 50ms, 200ms);
  std::atomic<bool> in_effect{false};
  std::atomic<bool> go_on{false};
  const auto inner = record();
  KafkaInboxConsumer consumer(o, [&](PGconn* c, const ConsumedEvent& e) {
    in_effect = true;
    while (!go_on) std::this_thread::sleep_for(5ms);
    inner(c, e);
  });
  Running running(consumer);
  ASSERT_TRUE(wait_until([&] { return in_effect.load(); }));
  postgres().stop_immediate();
  go_on = true;  // the effect's INSERT now meets a dead connection
  const bool noticed =
      wait_until([&] { return consumer.stats().health == Health::database_unavailable; });
  std::this_thread::sleep_for(300ms);
  postgres().start_again();
  connection_ = connect();
  const bool done = wait_until([&] { return applied() == 40; });
  running.stop();
  EXPECT_TRUE(noticed);
  EXPECT_TRUE(done) << applied();
  const KafkaConsumerStats stats = consumer.stats();
  EXPECT_GE(stats.failed_batches, 1U);
  EXPECT_EQ(stats.effect_failures, 0U);  // the database failed, not the effect
  EXPECT_GE(stats.reconnects, 1U);
  EXPECT_EQ(distinct_applied(), 40);
}

// The connection dies inside the inbox COMMIT (a deferred trigger makes the backend terminate
// itself, once): the commit's outcome is unknown to the consumer. run() treats it as an outage,
// reconnects and applies the batch again; nothing is lost or applied twice.
TEST_F(KafkaConsumerTest, RunSurvivesAConnectionLostDuringItsCommit) {
  pg::exec(conn(), fmt::format(R"SQL(
CREATE SEQUENCE {s}.kill_once;
CREATE FUNCTION {s}.die_in_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('{s}.kill_once') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER die_in_commit AFTER INSERT ON {s}.applied
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.die_in_commit();)SQL",
                               fmt::arg("s", schema_.quoted())));
  produce(10, 3);
  KafkaInboxConsumer consumer(retrying("commit-lost", 20ms, 100ms), record());
  Running running(consumer);
  const bool done = wait_until([&] { return applied() == 10 || running.threw(); });
  running.stop();
  EXPECT_FALSE(running.threw()) << consumer.stats().last_error;
  EXPECT_TRUE(done) << applied();
  EXPECT_EQ(applied(), 10);
  EXPECT_GE(consumer.stats().failed_batches, 1U);
  EXPECT_GE(consumer.stats().reconnects, 1U);
  EXPECT_EQ(distinct_applied(), 10);
}

// librdkafka's mock keeps at most 5 MiB per partition and drops the oldest messages beyond that,
// as a real broker drops them past retention.bytes or retention.ms. Makes partition 0 of the
// topic lose what the group `group` committed and had not read yet: 3 small messages applied and
// committed, then 32 of 256 KiB (8 MiB), of which the oldest are dropped unread.
class OffsetGapTest : public KafkaConsumerTest {
 protected:
  std::vector<RawMessage> messages(int first_sequence, int n, std::size_t bytes) {
    std::vector<RawMessage> out;
    for (int i = 0; i < n; ++i) {
      const EventId id = EventId::generate();
      out.push_back({"o1", std::string(bytes, 'x'), headers(id, first_sequence + i)});
      ids_.push_back(id);
    }
    return out;
  }

  // The group applies and commits 3 messages of partition 0 and 1 of partition 1, then partition
  // 0 gets 8 MiB more; returns the partition's new log start.
  long long lose_unread_messages(const std::string& group) {
    produce_to_partition(kafka().bootstrap_servers(), topic_, 0, messages(1, 3, 10));
    produce_to_partition(kafka().bootstrap_servers(), topic_, 1, messages(1, 1, 10));
    {
      KafkaInboxConsumer consumer(options(group), record());
      poll_until(consumer, [&] { return consumer.stats().applied >= 4; });
      EXPECT_EQ(consumer.stats().applied, 4U);
    }  // commits its stored offsets as it closes
    produce_to_partition(kafka().bootstrap_servers(), topic_, 0, messages(4, 32, 256 * 1024));
    const auto [low, high] = watermarks(kafka().bootstrap_servers(), topic_, 0);
    EXPECT_EQ(high, 35);
    EXPECT_GT(low, 3) << "the mock kept every message: nothing to test";
    return low;
  }

  std::vector<EventId> ids_;
};

// The group's next message on partition 0 is gone: the partition stops and says why, the other
// partition goes on, nothing after the gap is applied. With either rebalance protocol (the
// consumer assigns partitions itself).
class OffsetGapStopTest : public OffsetGapTest,
                          public ::testing::WithParamInterface<const char*> {};

TEST_P(OffsetGapStopTest, AnOffsetGoneFromTheBrokerStopsItsPartitionAndSaysWhy) {
  const std::string group = std::string("gap-stop-") + GetParam();
  const long long low = lose_unread_messages(group);
  KafkaConsumerOptions o = options(group);
  o.properties["partition.assignment.strategy"] = GetParam();
  KafkaInboxConsumer consumer(o, record());
  poll_until(consumer, [&] { return consumer.stats().partitions_stopped == 1; });
  produce_to_partition(kafka().bootstrap_servers(), topic_, 1, messages(2, 1, 10));
  poll_until(consumer, [&] { return consumer.stats().applied >= 1; });
  for (int i = 0; i < 10; ++i) consumer.poll(100ms);  // a stopped partition stays stopped

  const KafkaConsumerStats s = consumer.stats();
  EXPECT_EQ(s.partitions_stopped, 1);
  EXPECT_EQ(s.health, Health::partition_stopped);
  EXPECT_EQ(s.offset_gaps, 1U);
  EXPECT_EQ(s.offset_gap_messages, static_cast<std::uint64_t>(low - 3));
  EXPECT_EQ(s.applied, 1U) << "only partition 1's new message";
  EXPECT_NE(s.last_error.find(topic_ + "[0]"), std::string::npos) << s.last_error;
  EXPECT_NE(s.last_error.find(fmt::format("offset 3, is gone from the broker; the partition now "
                                          "starts at offset {}: {} messages (offsets 3 to {})",
                                          low, low - 3, low - 1)),
            std::string::npos)
      << s.last_error;
  EXPECT_EQ(applied(), 5);  // 4 before the gap, 1 on partition 1 after it
}

INSTANTIATE_TEST_SUITE_P(Protocols, OffsetGapStopTest,
                         ::testing::Values("range,roundrobin", "cooperative-sticky"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.param) == "cooperative-sticky" ? "cooperative"
                                                                                   : "eager";
                         });

// on_offset_gap=skip goes on from the log start, counted; a later consumer of the group, with
// the default policy, finds nothing missing.
TEST_F(OffsetGapTest, SkipGoesOnFromTheLogStartAndCountsTheGap) {
  const long long low = lose_unread_messages("gap-skip");
  {
    KafkaConsumerOptions o = options("gap-skip");
    o.on_offset_gap = OffsetGapPolicy::skip;
    KafkaInboxConsumer consumer(o, record());
    poll_until(consumer, [&] { return applied() == 4 + (35 - low); });
    const KafkaConsumerStats s = consumer.stats();
    EXPECT_EQ(s.offset_gaps, 1U);
    EXPECT_EQ(s.offset_gap_messages, static_cast<std::uint64_t>(low - 3));
    EXPECT_EQ(s.partitions_stopped, 0);
    EXPECT_NE(s.health, Health::partition_stopped);
    EXPECT_NE(s.last_error.find("offsets 3 to"), std::string::npos) << s.last_error;
  }
  EXPECT_EQ(applied(), 4 + (35 - low));
  produce_to_partition(kafka().bootstrap_servers(), topic_, 0, messages(36, 1, 10));
  KafkaInboxConsumer consumer(options("gap-skip"), record());
  poll_until(consumer, [&] { return consumer.stats().applied >= 1; });
  EXPECT_EQ(consumer.stats().offset_gaps, 0U);
  EXPECT_EQ(consumer.stats().applied, 1U);
}

// Kafka forgets a group's committed offsets after offsets.retention.minutes without members: a
// group without offsets, on a partition that no longer starts at 0, whose inbox consumer applied
// events before, may have missed messages meanwhile. It stops that partition (an offset gap of
// unknown size); a partition that still starts at 0 starts there (nothing can be missing).
TEST_F(OffsetGapTest, AGroupWhoseOffsetsExpiredStopsWhereMessagesMayBeGone) {
  lose_unread_messages("gap-expired");
  KafkaInboxConsumer consumer(options("gap-expired-offsets-forgotten"), record());
  poll_until(consumer, [&] {
    return consumer.stats().partitions_stopped == 1 && consumer.stats().duplicates >= 1;
  });
  const KafkaConsumerStats s = consumer.stats();
  EXPECT_EQ(s.partitions_stopped, 1);
  EXPECT_EQ(s.offset_gaps, 1U);
  EXPECT_EQ(s.applied, 0U) << "nothing of partition 0 after the gap";
  EXPECT_EQ(s.duplicates, 1U) << "partition 1 again from offset 0";
  EXPECT_NE(s.last_error.find(topic_ + "[0]: the group has no committed offset"), std::string::npos)
      << s.last_error;
  EXPECT_EQ(applied(), 4);
}

TEST_F(KafkaConsumerTest, AutoOffsetResetIsRefusedWithTheReason) {
  KafkaConsumerOptions o = options("reset");
  o.properties["auto.offset.reset"] = "earliest";
  try {
    KafkaInboxConsumer consumer(o, record());
    FAIL() << "accepted auto.offset.reset";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("on_offset_gap"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace outbox::testing
