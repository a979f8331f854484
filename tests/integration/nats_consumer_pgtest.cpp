// The NATS JetStream inbox consumer against a real nats-server: events a relay published are
// applied once each and in order per aggregate, acknowledged only after the inbox commit; a
// failed batch comes back whole and in order; a redelivery after a commit is a duplicate.

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <atomic>

#include "common/fault.hpp"
#include "nats/nats_common.hpp"
#include "outbox/nats_audit.hpp"
#include "outbox/nats_consumer.hpp"
#include "outbox/nats_sink.hpp"
#include "support/consumer_effects.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class NatsConsumerTest : public RelayFixture {
 protected:
  void SetUp() override {
    RelayFixture::SetUp();
    stream_ = "C" + schema_.name();
    prefix_ = "c" + schema_.name();
    effects_ = std::make_unique<ConsumerEffects>(conn(), schema_);
  }
  void TearDown() override { fault::arm(""); }

  // Publishes `aggregates` x `per_aggregate` events to this test's stream through a relay.
  void publish(int aggregates, int per_aggregate, int first_k = 0) {
    enqueue(aggregates, per_aggregate, false, first_k);
    NatsSinkOptions sink;
    sink.servers = nats_server().url();
    sink.stream = stream_;
    sink.subject_template = prefix_ + ".{aggregate_type}.{partition}";
    sink.create_stream = true;
    Relay relay(options("r"), make_nats_sink(sink));
    ASSERT_TRUE(relay.run_until_idle(30s));
    ASSERT_EQ(unpublished(), 0);
  }
  NatsConsumerOptions consumer_options(int batch = 10) {
    NatsConsumerOptions o;
    o.servers = nats_server().url();
    o.stream = stream_;
    o.durable = "test";
    o.filter_subject = prefix_ + ".*.*";
    o.database_url = database_url();
    o.schema = schema_;
    o.batch = batch;
    o.ack_wait = 1s;
    o.retry_backoff_base = 10ms;
    o.retry_backoff_max = 50ms;
    return o;
  }
  NatsInboxConsumer::Effect record() { return effects_->record(); }
  // Polls until `want` effects exist or `limit` passes; failures of poll() are swallowed.
  long long poll_until(NatsInboxConsumer& consumer, long long want, std::chrono::seconds limit) {
    const long long applied = effects_->poll_until([&] { consumer.poll(200ms); }, want, limit);
    last_error_ = effects_->last_error();
    return applied;
  }
  long long effects() { return effects_->all(); }
  long long out_of_order() { return effects_->out_of_order(); }
  // A client of the test's own, for what happens behind the consumer's back.
  struct RawClient {
    nats::ConnectionHandle connection;
    nats::ContextHandle js;
  };
  static RawClient raw_client() {
    natsConnection* connection = nullptr;
    EXPECT_EQ(natsConnection_ConnectTo(&connection, nats_server().url().c_str()), NATS_OK);
    jsCtx* js = nullptr;
    EXPECT_EQ(natsConnection_JetStream(&js, connection, nullptr), NATS_OK);
    return RawClient{nats::ConnectionHandle(connection), nats::ContextHandle(js)};
  }
  // The durable consumer "test" made by someone else (explicit acks, ack_wait 1 s).
  void add_durable(jsCtx* js, std::int64_t max_ack_pending, std::int64_t max_deliver) {
    jsConsumerConfig config;
    jsConsumerConfig_Init(&config);
    config.Durable = "test";
    config.AckPolicy = js_AckExplicit;
    config.AckWait = 1000000000;
    config.MaxAckPending = max_ack_pending;
    config.MaxDeliver = max_deliver;
    const std::string filter = prefix_ + ".*.*";
    config.FilterSubject = filter.c_str();
    jsConsumerInfo* info = nullptr;
    ASSERT_EQ(js_AddConsumer(&info, js, stream_.c_str(), &config, nullptr, nullptr), NATS_OK);
    jsConsumerInfo_Destroy(info);
  }
  std::string stream_;
  std::string prefix_;
  std::string last_error_;  // what poll() threw last in poll_until
  std::unique_ptr<ConsumerEffects> effects_;
};

TEST_F(NatsConsumerTest, AppliesEveryEventOnceInOrderAndAcknowledgesAfterTheCommit) {
  publish(4, 10);
  {
    NatsInboxConsumer consumer(consumer_options(), record());
    EXPECT_EQ(poll_until(consumer, 40, 30s), 40) << last_error_;
    const auto stats = consumer.stats();
    EXPECT_EQ(stats.applied, 40U);
    EXPECT_EQ(stats.duplicates, 0U);
    EXPECT_EQ(stats.pending_messages, 0);
  }
  EXPECT_EQ(out_of_order(), 0);
  // The same durable consumer again: everything was acknowledged, nothing comes back.
  NatsInboxConsumer again(consumer_options(), record());
  std::this_thread::sleep_for(1500ms);  // past ack_wait: an unacknowledged message would be due
  EXPECT_EQ(again.poll(500ms), 0U);
  publish(4, 1, 10);
  EXPECT_EQ(poll_until(again, 44, 30s), 44);
  EXPECT_EQ(out_of_order(), 0);
}

TEST_F(NatsConsumerTest, AFailedBatchComesBackWholeAndInOrderBeforeAnythingAfterIt) {
  publish(3, 10);
  std::atomic<int> failures{0};
  const auto effect = record();
  NatsInboxConsumer consumer(consumer_options(7), [&](PGconn* c, const ConsumedEvent& e) {
    // The 5th event of agg-1 fails twice, then goes through.
    if (e.aggregate_id == "agg-1" && e.aggregate_sequence == 5 && failures.fetch_add(1) < 2) {
      throw std::runtime_error("effect failed on purpose");
    }
    effect(c, e);
  });
  EXPECT_EQ(poll_until(consumer, 30, 30s), 30);
  EXPECT_EQ(failures.load(), 3);
  EXPECT_EQ(out_of_order(), 0);
  const auto stats = consumer.stats();
  EXPECT_EQ(stats.failed_batches, 2U);
  EXPECT_EQ(stats.effect_failures, 2U);
  EXPECT_GE(stats.redeliveries, 7U) << "the failed batch, twice";
  EXPECT_EQ(stats.applied, 30U);
}

TEST_F(NatsConsumerTest, ARedeliveryAfterTheInboxCommitIsADuplicateNotASecondEffect) {
  publish(2, 5);
  fault::arm(std::string(fault::kConsumerAfterCommitBeforeOffset) + "=error@1");
  NatsInboxConsumer consumer(consumer_options(), record());
  EXPECT_THROW(consumer.poll(2s), std::exception) << "committed, then failed before the acks";
  EXPECT_EQ(effects(), 10);
  fault::arm("");
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (consumer.stats().duplicates < 10 && std::chrono::steady_clock::now() < until) {
    consumer.poll(200ms);
  }
  EXPECT_EQ(consumer.stats().duplicates, 10U) << "redelivered after ack_wait";
  EXPECT_EQ(effects(), 10);
  EXPECT_GE(consumer.stats().redeliveries, 10U);
}

// Messages delivered and never acknowledged (a consumer process killed between its fetch and its
// commit; a fetch's answer lost with a server that died) come again only after ack_wait. The next
// consumer must apply them before the events after them, not fetch past them.
TEST_F(NatsConsumerTest, MessagesDeliveredAndNeverAcknowledgedAreAppliedBeforeLaterOnes) {
  publish(2, 5);
  // The durable consumer as NatsInboxConsumer makes it (batch 3), made here so that nothing is
  // delivered before the fetch below.
  const RawClient client = raw_client();
  jsCtx* js = client.js.get();
  add_durable(js, 3, -1);
  // A consumer that died after its fetch: two messages delivered, never acknowledged; fewer than
  // max_ack_pending (3), so the server would hand out a later one at once.
  jsSubOptions bind;
  jsSubOptions_Init(&bind);
  bind.Stream = stream_.c_str();
  bind.Consumer = "test";
  natsSubscription* dead = nullptr;
  ASSERT_EQ(
      js_PullSubscribe(&dead, js, (prefix_ + ".*.*").c_str(), "test", nullptr, &bind, nullptr),
      NATS_OK);
  natsMsgList taken{nullptr, 0};
  ASSERT_EQ(natsSubscription_Fetch(&taken, dead, 2, 5000, nullptr), NATS_OK);
  EXPECT_EQ(taken.Count, 2);
  natsMsgList_Destroy(&taken);
  natsSubscription_Destroy(dead);

  NatsInboxConsumer next(consumer_options(3), record());
  EXPECT_EQ(poll_until(next, 10, 30s), 10) << last_error_;
  EXPECT_EQ(out_of_order(), 0) << "the two came first, when they came again";
  EXPECT_EQ(next.stats().redelivery_waits, 1U);
  EXPECT_EQ(next.stats().duplicates, 0U);
}

// The stream read back by time without consuming: what the rows, the stream and the inbox say.
TEST_F(NatsConsumerTest, TheAuditFindsALostMessageAPhantomAndWhatTheInboxHasNotApplied) {
  publish(2, 5);
  {
    NatsInboxConsumer consumer(consumer_options(), record());
    ASSERT_EQ(poll_until(consumer, 10, 30s), 10);
  }
  NatsAuditOptions audit;
  audit.database_url = database_url();
  audit.schema = schema_;
  audit.servers = nats_server().url();
  audit.stream = stream_;
  audit.since = "2000-01-01T00:00:00Z";
  audit.consumer = "test";
  AuditReport clean = audit_nats_stream(audit);
  EXPECT_EQ(clean.rows, 10);
  EXPECT_EQ(clean.messages, 10);
  EXPECT_FALSE(clean.loss());
  EXPECT_TRUE(clean.not_applied.empty());
  EXPECT_TRUE(clean.consumer_known);

  // One message deleted from the stream, one announced that no transaction committed, one event
  // published that the consumer never applied.
  const RawClient client = raw_client();
  jsCtx* js = client.js.get();
  ASSERT_EQ(js_DeleteMsg(js, stream_.c_str(), 3, nullptr, nullptr), NATS_OK);
  natsMsg* forged = nullptr;
  ASSERT_EQ(natsMsg_Create(&forged, (prefix_ + ".order.0").c_str(), nullptr, "{}", 2), NATS_OK);
  const std::string phantom = EventId::generate().to_string();
  natsMsgHeader_Set(forged, "event_id", phantom.c_str());
  jsPubAck* ack = nullptr;
  ASSERT_EQ(js_PublishMsg(&ack, js, forged, nullptr, nullptr), NATS_OK);
  jsPubAck_Destroy(ack);
  natsMsg_Destroy(forged);
  publish(1, 1, 5);  // agg-0 #6: published, not applied

  const AuditReport after = audit_nats_stream(audit);
  EXPECT_EQ(after.rows, 11);
  EXPECT_EQ(after.lost.size(), 1U);
  ASSERT_EQ(after.phantom.size(), 1U);
  EXPECT_EQ(after.phantom[0].to_string(), phantom);
  EXPECT_EQ(after.not_applied.size(), 1U);
  EXPECT_TRUE(after.loss());
}

// Consumers often start before the relay that creates the stream: the consumer waits for it.
TEST_F(NatsConsumerTest, AConsumerStartedBeforeItsStreamWaitsForIt) {
  NatsInboxConsumer consumer(consumer_options(), record());
  EXPECT_THROW(consumer.poll(100ms), BrokerError);
  std::thread run([&] { consumer.run(); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(consumer.stats().health, Health::broker_unavailable);
  EXPECT_NE(consumer.stats().last_error.find("does not exist"), std::string::npos)
      << consumer.stats().last_error;
  publish(2, 3);
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (effects() < 6 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
  }
  consumer.request_stop();
  run.join();
  EXPECT_EQ(effects(), 6);
}

// A delivery limit would drop an event that failed often enough, and its successor would go
// first: an existing durable consumer with one is refused by outbox's own check.
TEST_F(NatsConsumerTest, AnExistingConsumerWithADeliveryLimitIsRefused) {
  publish(1, 1);
  add_durable(raw_client().js.get(), 10, 5);
  NatsInboxConsumer consumer(consumer_options(10), record());
  try {
    consumer.poll(200ms);
    ADD_FAILURE() << "a durable consumer with max_deliver 5 was used";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("max_deliver 5"), std::string::npos) << error.what();
  }
  EXPECT_EQ(effects(), 0);
}

TEST_F(NatsConsumerTest, AnExistingConsumerThatWouldBreakOrderIsRefused) {
  publish(1, 1);
  {
    NatsInboxConsumer wide(consumer_options(50), record());
    EXPECT_EQ(poll_until(wide, 1, 20s), 1);
  }
  NatsInboxConsumer narrow(consumer_options(10), record());
  try {
    narrow.poll(200ms);
    ADD_FAILURE() << "a consumer with max_ack_pending 50 was used with batches of 10";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("max_ack_pending"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace outbox::testing
