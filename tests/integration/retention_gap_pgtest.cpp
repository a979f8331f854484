// A consumer that fell behind the topic's retention, end to end: the relay publishes, the broker
// drops messages the consumer group had not read (librdkafka's mock keeps at most 5 MiB per
// partition, as a broker does with retention.bytes), the consumer stops the partition instead
// of skipping, the audit names the events as lost from the topic and not applied, and the
// runbook's recovery (docs/OPERATIONS.md, OutboxConsumerOffsetGap: restart once with
// on_offset_gap=skip, replay the window) leaves nothing unapplied.

#include "outbox/audit.hpp"
#include "outbox/kafka_consumer.hpp"
#include "outbox/replay.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class RetentionGapTest : public RelayFixture {
 protected:
  void SetUp() override {
    RelayFixture::SetUp();
    kafka().create_topic(topic_, 1, 1);
    pg::exec(conn(), "CREATE TABLE " + schema_.table("applied") + " (event_id uuid NOT NULL)");
  }

  // `n` events of aggregate "agg-<i % 3>" with payloads of about `bytes`, one transaction each.
  std::vector<EventId> enqueue_padded(int n, std::size_t bytes) {
    const Producer producer(ProducerOptions{schema_});
    std::vector<EventId> ids;
    for (int i = 0; i < n; ++i) {
      pg::exec(conn(), "BEGIN");
      ids.push_back(producer
                        .enqueue(conn(), NewEvent{"order", "agg-" + std::to_string(i % 3), "Step",
                                                  R"({"pad":")" + std::string(bytes, 'x') + "\"}",
                                                  "{}", 1, std::nullopt})
                        .event_id);
      pg::commit(conn());
    }
    return ids;
  }

  KafkaConsumerOptions consumer_options(OffsetGapPolicy policy) {
    KafkaConsumerOptions o;
    o.brokers = kafka().bootstrap_servers();
    o.group_id = "gap-" + schema_.name();
    o.topics = {topic_};
    o.database_url = database_url();
    o.schema = schema_;
    o.consumer_name = "projection";
    o.properties = {{"session.timeout.ms", "3000"}, {"heartbeat.interval.ms", "500"}};
    o.on_offset_gap = policy;
    return o;
  }

  KafkaInboxConsumer::Effect record() {
    return [this](PGconn* c, const ConsumedEvent& e) {
      pg::exec(c, "INSERT INTO " + schema_.table("applied") + " VALUES ($1)",
               {e.event_id.to_string().c_str()});
    };
  }

  template <typename Done>
  static void poll_until(KafkaInboxConsumer& consumer, Done done) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!done() && std::chrono::steady_clock::now() < deadline) consumer.poll(100ms);
  }

  AuditReport audit() {
    AuditOptions a;
    a.database_url = database_url();
    a.schema = schema_;
    a.brokers = kafka().bootstrap_servers();
    a.topic = topic_;
    a.topic_template = topic_;  // the fixture's sink sends every event there
    a.since = "2000-01-01T00:00:00Z";
    a.consumer = "projection";
    a.from_beginning = true;  // the mock cannot look offsets up by time
    return audit_topic(a);
  }

  long long applied() { return count(conn(), "SELECT count(*) FROM " + schema_.table("applied")); }
};

TEST_F(RetentionGapTest, TheConsumerStopsTheAuditNamesTheGapAndReplayRecoversIt) {
  Relay relay(options("gap"), sink());
  enqueue_padded(3, 10);
  ASSERT_TRUE(relay.run_until_idle(30s));
  {
    KafkaInboxConsumer consumer(consumer_options(OffsetGapPolicy::stop), record());
    poll_until(consumer, [&] { return applied() == 3; });
    ASSERT_EQ(applied(), 3);
  }  // commits offset 3 as it closes

  // 32 events of 256 KiB while no consumer runs: the oldest unread ones are dropped.
  const std::vector<EventId> flood = enqueue_padded(32, 256 * 1024);
  ASSERT_TRUE(relay.run_until_idle(60s));
  const long long low = watermarks(kafka().bootstrap_servers(), topic_, 0).first;
  ASSERT_GT(low, 3) << "the mock kept every message: nothing to test";
  const auto dropped = static_cast<std::size_t>(low - 3);

  {
    KafkaInboxConsumer consumer(consumer_options(OffsetGapPolicy::stop), record());
    poll_until(consumer, [&] { return consumer.stats().partitions_stopped == 1; });
    for (int i = 0; i < 5; ++i) consumer.poll(100ms);
    EXPECT_EQ(consumer.stats().health, Health::partition_stopped);
    EXPECT_EQ(consumer.stats().offset_gap_messages, dropped);
    EXPECT_EQ(applied(), 3) << "nothing after the gap may be applied";
  }

  // Before: every event of the flood not applied; every message below the log start lost from
  // the topic (the 3 applied ones too). Lost and not applied: what must be replayed.
  const AuditReport before = audit();
  EXPECT_EQ(before.not_applied.size(), flood.size());
  EXPECT_EQ(before.lost.size(), static_cast<std::size_t>(low));
  std::vector<EventId> missing;
  for (const EventId& id : before.lost) {
    if (std::find(before.not_applied.begin(), before.not_applied.end(), id) !=
        before.not_applied.end()) {
      missing.push_back(id);
    }
  }
  ASSERT_EQ(missing.size(), dropped);
  for (std::size_t i = 0; i < dropped; ++i) {
    EXPECT_NE(std::find(missing.begin(), missing.end(), flood[i]), missing.end());
  }

  // The runbook's quick recovery: once with skip (the rest of the partition is applied), then
  // replay the window of the lost events (the audit's list), which the same consumer applies.
  KafkaInboxConsumer consumer(consumer_options(OffsetGapPolicy::skip), record());
  poll_until(consumer, [&] { return applied() == 3 + static_cast<long long>(32 - dropped); });
  EXPECT_EQ(consumer.stats().offset_gaps, 1U);
  std::string lost = "{";
  for (const EventId& id : missing) lost += (lost.size() > 1 ? "," : "") + id.to_string();
  lost += "}";
  const auto window =
      pg::exec(conn(),
               "SELECT min(occurred_at)::text, max(occurred_at)::text FROM " +
                   schema_.table("outbox_events") + " WHERE event_id = ANY($1::uuid[])",
               {lost.c_str()});
  ReplayFilter filter;
  filter.since = window.text(0, 0);
  // Through the last lost one ([since, until) is half open).
  filter.until = pg::exec(conn(), "SELECT ($1::timestamptz + interval '1 microsecond')::text",
                          {std::string(window.text(0, 1)).c_str()})
                     .text(0, 0);
  const ReplayResult replayed =
      replay_published(conn(), schema_, filter, "tester", "consumer fell behind retention");
  EXPECT_EQ(replayed.replayed.size(), dropped);
  ASSERT_TRUE(relay.run_until_idle(60s));
  poll_until(consumer, [&] { return applied() == 35; });
  EXPECT_EQ(applied(), 35);
  EXPECT_EQ(count(conn(), "SELECT count(DISTINCT event_id) FROM " + schema_.table("applied")), 35);

  const AuditReport after = audit();
  EXPECT_TRUE(after.not_applied.empty()) << after.not_applied.size() << " not applied";
  // (The replay's 3 MiB pushed older messages out of the mock's 5 MiB again, so the audit now
  // finds those lost from the topic; all of them were applied first.)
}

}  // namespace
}  // namespace outbox::testing
