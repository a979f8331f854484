// NewEvent's trace context and delayed delivery, end to end: the traceparent reaches the broker
// as a message header; a delayed event, and its aggregate's later events behind it, are not
// published before their time, and then in order.

#include "outbox/kafka_consumer.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class DeliveryOptionsTest : public RelayFixture {
 protected:
  EventId enqueue_one(const std::string& aggregate, const std::string& trace,
                      std::chrono::milliseconds delay) {
    const Producer producer(ProducerOptions{schema_, 4096});
    NewEvent event{"order", aggregate, "Step", "{}", R"({"tenant": "t1"})", 1, std::nullopt};
    event.traceparent = trace;
    event.deliver_after = delay;
    pg::exec(conn(), "BEGIN");
    const EventId id = producer.enqueue(conn(), event).event_id;
    pg::commit(conn());
    return id;
  }

  bool published(const EventId& id) {
    return count(conn(),
                 "SELECT count(*) FROM " + schema_.table("outbox_events") +
                     " WHERE event_id = $1 AND published_at IS NOT NULL",
                 {id.to_string().c_str()}) == 1;
  }
};

TEST_F(DeliveryOptionsTest, TheTraceparentReachesTheBrokerAsAHeader) {
  const std::string trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const EventId id = enqueue_one("traced", trace, std::chrono::milliseconds(0));
  Relay relay(options("tracer"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  const auto messages = read_topic_until(
      kafka().bootstrap_servers(), topic_,
      [](const std::vector<ReadMessage>& so_far) { return !so_far.empty(); }, 20s);
  ASSERT_FALSE(messages.empty());
  EXPECT_EQ(messages.front().headers.at("event_id"), id.to_string());
  EXPECT_EQ(messages.front().headers.at("traceparent"), trace);
  EXPECT_EQ(messages.front().headers.at("tenant"), "t1");  // the caller's headers kept

  // The inbox consumer hands it to the effect.
  KafkaConsumerOptions consumer_options;
  consumer_options.brokers = kafka().bootstrap_servers();
  consumer_options.group_id = "trace-" + schema_.name();
  consumer_options.topics = {topic_};
  consumer_options.database_url = database_url();
  consumer_options.schema = schema_;
  std::string seen;
  KafkaInboxConsumer consumer(consumer_options,
                              [&](PGconn*, const ConsumedEvent& e) { seen = e.traceparent; });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (seen.empty() && std::chrono::steady_clock::now() < deadline) consumer.poll(100ms);
  EXPECT_EQ(seen, trace);
}

TEST_F(DeliveryOptionsTest, ADelayedEventAndItsSuccessorsWaitForItsTimeThenGoInOrder) {
  const EventId delayed = enqueue_one("late", "", std::chrono::milliseconds(2000));
  const EventId behind = enqueue_one("late", "", std::chrono::milliseconds(0));
  const EventId other = enqueue_one("early", "", std::chrono::milliseconds(0));
  const auto written = std::chrono::steady_clock::now();
  Relay relay(options("patient"), sink());
  relay.run_until_idle(1000ms);
  ASSERT_LT(std::chrono::steady_clock::now() - written, 1900ms) << "the machine is too slow";
  EXPECT_TRUE(published(other));
  EXPECT_FALSE(published(delayed)) << "published before its deliver_after";
  EXPECT_FALSE(published(behind)) << "its successor overtook the delayed event";
  std::this_thread::sleep_until(written + 2100ms);
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_TRUE(published(delayed));
  EXPECT_TRUE(published(behind));
  expect_on_broker_in_order({delayed, behind});
}

}  // namespace
}  // namespace outbox::testing
