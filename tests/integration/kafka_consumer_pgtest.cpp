#include <gtest/gtest.h>

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

}  // namespace
}  // namespace outbox::testing
