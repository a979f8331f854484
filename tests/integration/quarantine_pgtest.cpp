#include <gtest/gtest.h>

#include "outbox/quarantine.hpp"
#include "outbox/quarantine_format.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class QuarantineTest : public RelayFixture {
 protected:
  // Aggregate "big": sequence 1 is larger than the broker takes, sequence 2 is fine.
  EventId enqueue_poison() {
    const Producer producer(ProducerOptions{schema_, 64 * 1024});
    pg::exec(conn(), "BEGIN");
    const auto poison = producer.enqueue(
        conn(),
        NewEvent{"order", "big", "Step", "\"" + std::string(5000, 'x') + "\"", "{}", 1, {}});
    producer.enqueue(conn(), NewEvent{"order", "big", "Step", "{}", "{}", 1, {}});
    pg::commit(conn());
    return poison.event_id;
  }
  std::unique_ptr<Sink> small_message_sink() { return sink({{"message.max.bytes", "2000"}}); }
  long long unfinished(const std::string& aggregate_id) {
    return count(conn(),
                 "SELECT count(*) FROM " + schema_.table("outbox_events") +
                     " WHERE published_at IS NULL AND skipped_at IS NULL AND aggregate_id = $1",
                 {aggregate_id.c_str()});
  }
};

TEST_F(QuarantineTest, APermanentFailureIsQuarantinedAndBlocksOnlyItsAggregate) {
  const EventId poison = enqueue_poison();
  enqueue(5, 3);  // other aggregates
  Relay relay(options("r"), small_message_sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(relay.stats().quarantined, 1U);
  EXPECT_EQ(relay.stats().published, 15U) << "every other aggregate must keep flowing";
  EXPECT_EQ(unfinished("big"), 2) << "the poison event and the one behind it";

  const auto listed = list_quarantined(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].event_id, poison);
  EXPECT_EQ(listed[0].reason, "permanent failure");
  EXPECT_NE(listed[0].last_error.find("too large"), std::string::npos) << listed[0].last_error;
  EXPECT_EQ(listed[0].attempt_count, 1);
  EXPECT_EQ(listed[0].blocked_events, 1);

  // It is not retried on its own.
  relay.run_until_idle(2s);
  EXPECT_EQ(relay.stats().claimed, 16U);
}

TEST_F(QuarantineTest, SkippingIsAuditedAndLetsTheAggregateMoveOn) {
  const EventId poison = enqueue_poison();
  Relay relay(options("r"), small_message_sink());
  relay.run_until_idle(30s);
  ASSERT_EQ(relay.stats().quarantined, 1U);

  EXPECT_THROW(skip_quarantined(conn(), schema_, poison, "alice", ""), InvalidArgument);
  EXPECT_THROW(skip_quarantined(conn(), schema_, poison, "", "bad data"), InvalidArgument);
  EXPECT_THROW(skip_quarantined(conn(), schema_, EventId::generate(), "alice", "x"),
               InvalidArgument);
  // The audit takes one line of printable text: no forged line, escape sequence or override.
  for (const auto& [actor, reason] :
       std::vector<std::pair<std::string, std::string>>{{"alice", "one\nforged line"},
                                                        {"ali\x1b[2Jce", "why"},
                                                        {"alice", "fine \xe2\x80\xae enif"},
                                                        {"alice", "\xff"}}) {
    try {
      skip_quarantined(conn(), schema_, poison, actor, reason);
      ADD_FAILURE() << "stored an audit text with a control character";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("one line of printable text"), std::string::npos)
          << error.what();
    }
  }
  const std::vector<EventId> ids{poison};
  EXPECT_THROW(retry_quarantined(conn(), schema_, ids, "bob\r\nalice"), InvalidArgument);
  EXPECT_EQ(unfinished("big"), 2) << "refused skips must change nothing";

  skip_quarantined(conn(), schema_, poison, "alice", "payload exceeds the broker limit; ticket 42");
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(unfinished("big"), 0);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE aggregate_id = 'big' AND published_at IS NOT NULL"),
            1)
      << "the skipped event is not published; the next one is";
  const auto audit = pg::exec(conn(), "SELECT event_id::text, action, actor, reason FROM " +
                                          schema_.table("outbox_operator_audit"));
  ASSERT_EQ(audit.rows(), 1);
  EXPECT_EQ(audit.text(0, 0), poison.to_string());
  EXPECT_EQ(audit.text(0, 1), "skip");
  EXPECT_EQ(audit.text(0, 2), "alice");
  EXPECT_EQ(audit.text(0, 3), "payload exceeds the broker limit; ticket 42");
  EXPECT_THROW(skip_quarantined(conn(), schema_, poison, "alice", "again"), InvalidArgument);
}

TEST_F(QuarantineTest, TheAttemptLimitQuarantinesAndRetryDeliversOnceTheCauseIsGone) {
  const auto ids = enqueue(1, 2);
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_down(broker, true);
  auto o = options("r");
  o.max_attempts = 2;
  o.backoff_base = 100ms;
  o.backoff_max = 200ms;
  Relay relay(o, sink({{"message.timeout.ms", "300"}}));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (relay.stats().quarantined == 0 && std::chrono::steady_clock::now() < deadline) {
    relay.run_until_idle(500ms);
  }
  for (int broker = 1; broker <= 3; ++broker) kafka().set_broker_down(broker, false);
  const auto listed = list_quarantined(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].reason, "gave up after 2 attempts");
  EXPECT_EQ(listed[0].attempt_count, 2);

  const std::vector<EventId> retry = {listed[0].event_id, EventId::generate()};
  EXPECT_EQ(retry_quarantined(conn(), schema_, retry, "bob"), 1U) << "unknown ids are left alone";
  // A relay with the usual message timeout: the first one's 300 ms can expire again while the
  // client reconnects to the brokers that just came back.
  Relay healthy(options("r2"), sink());
  while (unfinished("agg-0") > 0 && std::chrono::steady_clock::now() < deadline + 30s) {
    healthy.run_until_idle(500ms);
  }
  EXPECT_EQ(unfinished("agg-0"), 0);
  EXPECT_EQ(healthy.stats().quarantined, 0U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_operator_audit") +
                              " WHERE action = 'retry' AND actor = 'bob'"),
            1);
  expect_on_broker_in_order(ids);
}

// Issue "Hardening" #3: another writer inserts a row whose names carry terminal escapes (the
// producer refuses them, plain SQL does not). Its topic cannot be a Kafka topic, so the relay
// quarantines it; `outbox quarantine list` then shows every field escaped, and nothing in the
// output acts on the operator's terminal.
TEST_F(QuarantineTest, AQuarantinedRowWithTerminalEscapesIsListedEscaped) {
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_events") +
                       " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                       "  schema_version, payload, headers)"
                       " VALUES (gen_random_uuid(), E'order\\x1b[2J', E'4711\\n2026-12-01 forged',"
                       " 1, E'Paid\\u202e', 1, '{}', '{}')");
  // Topics by aggregate type, as outbox's default template has them.
  Relay relay(options("r"), make_kafka_sink(KafkaSinkOptions{
                                kafka().bootstrap_servers(), topic_ + ".{aggregate_type}", {}}));
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(relay.stats().quarantined, 1U);
  const auto listed = list_quarantined(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  ASSERT_EQ(listed[0].aggregate_type, "order\x1b[2J") << "the row holds the raw escape";
  const std::string text = cli::quarantined_text(listed[0]);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos) << text;
  EXPECT_NE(text.find("order\\x1b[2J 4711\\x0a2026-12-01 forged #1 Paid\\u202e"), std::string::npos)
      << text;
  EXPECT_NE(text.find(".order\\x1b[2J\" rendered"), std::string::npos) << "last error: " << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

// Issue "Hardening" #13: the template "{aggregate_type}" is fine, but an aggregate type can make
// it Kafka's internal __consumer_offsets, or a topic Kafka refuses. Such an event can never be
// sent: quarantined on its first attempt, not retried for an hour; other aggregates flow.
TEST_F(QuarantineTest, AnEventWhoseTopicIsInternalOrIllegalIsQuarantinedOnItsFirstAttempt) {
  const Producer producer(ProducerOptions{schema_, 4096});
  const std::string too_long(250, 't');
  pg::exec(conn(), "BEGIN");
  for (const std::string& type : {std::string("__consumer_offsets"), too_long}) {
    producer.enqueue(conn(), NewEvent{type, "a1", "Step", "{}", "{}", 1, {}});
  }
  producer.enqueue(conn(), NewEvent{topic_ + ".fine", "a1", "Step", "{}", "{}", 1, {}});
  pg::commit(conn());
  Relay relay(options("r"), make_kafka_sink(KafkaSinkOptions{
                                kafka().bootstrap_servers(), "{aggregate_type}", {}}));
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(relay.stats().published, 1U);
  EXPECT_EQ(relay.stats().quarantined, 2U);
  const auto listed = list_quarantined(conn(), schema_);
  ASSERT_EQ(listed.size(), 2U);
  for (const QuarantinedEvent& event : listed) {
    EXPECT_EQ(event.reason, "permanent failure");
    EXPECT_EQ(event.attempt_count, 1) << "no retries for what can never succeed";
    if (event.aggregate_type == "__consumer_offsets") {
      EXPECT_NE(event.last_error.find("Kafka reserves for its internal topics"), std::string::npos)
          << event.last_error;
    } else {
      EXPECT_NE(event.last_error.find("is 250 characters long"), std::string::npos)
          << event.last_error;
    }
  }
}

// The producer counts an event as librdkafka counts a message against message.max.bytes
// (1,000,000 by default), except that it counts the sequence at its longest (19 digits; this one
// has 1). So: counted at the limit, it is published; 18 bytes over the limit it is still within
// librdkafka's; 19 over it is refused by librdkafka and quarantined. Headers with one-, two- and
// three-byte lengths, an escaped payload and a repeated header name make every rule count.
TEST_F(QuarantineTest, TheProducersCountIsLibrdkafkasToTheByte) {
  constexpr std::size_t kMessageMaxBytes = 1'000'000;
  const std::string headers = R"({"tenant": "t1", ")" + std::string(70, 'n') + R"(": ")" +
                              std::string(9000, 'v') + R"(", "tenant": "t\u00e9"})";
  // A payload of `printed` bytes as jsonb prints it: {"d": "\né/xxx..."}, its escapes decoded
  // and written again (\n stays two bytes, \u00e9 becomes two, \/ one). Keys of equal length.
  auto event_of = [&](std::size_t printed, const std::string& id) {
    const std::string payload = R"({"d":"\n\u00e9\/)" + std::string(printed - 9 - 5, 'x') + R"("})";
    return NewEvent{"order", id, "Big", payload, headers, 1, {}};
  };
  ProducerOptions at_limit{schema_, kMessageMaxBytes};
  // The largest payload the producer accepts under the limit.
  std::size_t low = 14, high = kMessageMaxBytes;  // 14: the payload's fixed part
  while (low + 1 < high) {
    const std::size_t middle = (low + high) / 2;
    try {
      Producer(at_limit).validate(event_of(middle, "probe---"));
      low = middle;
    } catch (const InvalidArgument&) {
      high = middle;
    }
  }
  const Producer lenient(ProducerOptions{schema_, 2 * kMessageMaxBytes});
  pg::exec(conn(), "BEGIN");
  Producer(at_limit).enqueue(conn(), event_of(low, "atlimit-"));
  lenient.enqueue(conn(), event_of(low + 18, "within--"));
  const auto over = lenient.enqueue(conn(), event_of(low + 19, "over----"));
  pg::commit(conn());
  EXPECT_THROW(Producer(at_limit).validate(event_of(low + 1, "oneover-")), InvalidArgument);

  Relay relay(options("r"), sink());
  ASSERT_TRUE(relay.run_until_idle(60s));
  EXPECT_EQ(relay.stats().published, 2U);
  const auto listed = list_quarantined(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].event_id, over.event_id);
  EXPECT_NE(listed[0].last_error.find("too large"), std::string::npos) << listed[0].last_error;
}

}  // namespace
}  // namespace outbox::testing
