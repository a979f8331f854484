// Kafka topic templates, the configuration checks of make_kafka_sink, and DeliveryOutcome names.
// Constructing a sink starts librdkafka's threads but sends nothing; no broker is needed.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "contains.hpp"
#include "kafka/kafka_topic.hpp"
#include "outbox/error.hpp"
#include "outbox/kafka.hpp"
#include "outbox/sink.hpp"

namespace outbox {
namespace {

Event order_placed() {
  Event event;
  event.aggregate_type = "order";
  event.aggregate_id = "4711";
  event.event_type = "OrderPlaced";
  return event;
}

KafkaSinkOptions valid_options() {
  KafkaSinkOptions options;
  options.brokers = "127.0.0.1:1";  // nothing listens there; construction does not need it
  options.topic_template = "outbox.{aggregate_type}";
  return options;
}

// The message of the ConfigError make_kafka_sink(options) throws; fails the test otherwise.
bool accepted(const KafkaSinkOptions& options) {
  try {
    make_kafka_sink(options);
    return true;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "refused: " << error.what();
    return false;
  }
}

std::string config_error_of(const KafkaSinkOptions& options) {
  try {
    const std::unique_ptr<Sink> sink = make_kafka_sink(options);
    ADD_FAILURE() << "make_kafka_sink accepted the options";
  } catch (const ConfigError& error) {
    EXPECT_FALSE(error.retryable());
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw something other than ConfigError: " << error.what();
  }
  return {};
}

KafkaSinkOptions with_property(const std::string& key, const std::string& value) {
  KafkaSinkOptions options = valid_options();
  options.properties[key] = value;
  return options;
}

// --- render_topic ---

TEST(RenderTopic, ReplacesAggregateType) {
  EXPECT_EQ(render_topic("outbox.{aggregate_type}", order_placed()), "outbox.order");
}

TEST(RenderTopic, ReplacesEventType) {
  EXPECT_EQ(render_topic("events.{event_type}", order_placed()), "events.OrderPlaced");
}

TEST(RenderTopic, ReplacesBothPlaceholders) {
  EXPECT_EQ(render_topic("{aggregate_type}.{event_type}.v1", order_placed()),
            "order.OrderPlaced.v1");
}

TEST(RenderTopic, ReplacesRepeatedPlaceholders) {
  EXPECT_EQ(
      render_topic("{aggregate_type}-{aggregate_type}_{event_type}{event_type}", order_placed()),
      "order-order_OrderPlacedOrderPlaced");
}

TEST(RenderTopic, TemplateWithoutPlaceholdersIsTheTopic) {
  EXPECT_EQ(render_topic("all-events", order_placed()), "all-events");
  EXPECT_EQ(render_topic("", order_placed()), "");
}

TEST(RenderTopic, LeavesUnknownPlaceholdersLiterally) {
  EXPECT_EQ(render_topic("x.{foo}.{aggregate_type}", order_placed()), "x.{foo}.order");
  EXPECT_EQ(render_topic("{aggregate_id}", order_placed()), "{aggregate_id}");
}

TEST(RenderTopic, LeavesIncompleteAndMisspelledPlaceholdersLiterally) {
  EXPECT_EQ(render_topic("{aggregate_type", order_placed()), "{aggregate_type");
  EXPECT_EQ(render_topic("aggregate_type}", order_placed()), "aggregate_type}");
  EXPECT_EQ(render_topic("{Aggregate_Type}", order_placed()), "{Aggregate_Type}");
  EXPECT_EQ(render_topic("{{event_type}}", order_placed()), "{OrderPlaced}");
}

TEST(RenderTopic, DoesNotReexpandSubstitutedText) {
  Event event = order_placed();
  event.aggregate_type = "{event_type}";
  EXPECT_EQ(render_topic("t.{aggregate_type}", event), "t.{event_type}");
}

// --- make_kafka_sink: configuration errors ---

TEST(MakeKafkaSink, RejectsEmptyBrokers) {
  KafkaSinkOptions options = valid_options();
  options.brokers.clear();
  EXPECT_TRUE(contains(config_error_of(options), "no brokers"));
}

TEST(MakeKafkaSink, RejectsTemplateRenderingToATopicWithASpace) {
  KafkaSinkOptions options = valid_options();
  options.topic_template = "outbox {aggregate_type}";
  EXPECT_TRUE(contains(config_error_of(options),
                       "topic template \"outbox {aggregate_type}\" is not a Kafka topic name"));
}

TEST(MakeKafkaSink, RejectsTemplateRenderingToATopicWithASlash) {
  KafkaSinkOptions options = valid_options();
  options.topic_template = "outbox/{aggregate_type}";
  EXPECT_TRUE(contains(config_error_of(options), "is not a Kafka topic name"));
}

TEST(MakeKafkaSink, RejectsTemplateRenderingToAnEmptyTopic) {
  KafkaSinkOptions options = valid_options();
  options.topic_template = "";
  EXPECT_TRUE(contains(config_error_of(options), "is not a Kafka topic name"));
}

TEST(MakeKafkaSink, RejectsTemplatesKafkaReservesOrCannotHold) {
  const std::vector<std::string> templates = {".",   "..",        "{foo}",
                                              "x:y", "t\xC3\xA9", std::string(250, 'a')};
  for (const std::string& topic_template : templates) {
    KafkaSinkOptions options = valid_options();
    options.topic_template = topic_template;
    EXPECT_TRUE(contains(config_error_of(options), "is not a Kafka topic name")) << topic_template;
  }
}

// Issue "Hardening" #13: a producer must never write to Kafka's internal topics.
TEST(MakeKafkaSink, RejectsTemplatesOfKafkasInternalTopics) {
  for (const std::string topic_template :
       {"__consumer_offsets", "__transaction_state", "__{aggregate_type}", "__x.{event_type}",
        "{aggregate_type}", "_{event_type}"}) {
    KafkaSinkOptions options = valid_options();
    options.topic_template = topic_template;
    if (topic_template == "{aggregate_type}" || topic_template == "_{event_type}") {
      EXPECT_NO_THROW(make_kafka_sink(options)) << "only what the values make: " << topic_template;
      continue;
    }
    const std::string message = config_error_of(options);
    EXPECT_TRUE(contains(message, "starts with \"__\", which Kafka reserves for its internal"))
        << topic_template;
  }
}

TEST(MakeKafkaSink, SaysWhatIsWrongWithATemplate) {
  KafkaSinkOptions options = valid_options();
  options.topic_template = "outbox/{aggregate_type}";
  EXPECT_TRUE(contains(config_error_of(options), "has the character '/' at position 6"));
  options.topic_template = std::string(246, 'a') + ".{aggregate_type}.{event_type}";  // 250
  EXPECT_TRUE(
      contains(config_error_of(options), "is 250 characters long; Kafka allows at most 249"));
  options.topic_template = "out\x1b[2J{aggregate_type}";
  const std::string message = config_error_of(options);
  EXPECT_TRUE(contains(message, "has the byte 0x1b at position 3"));
  EXPECT_TRUE(contains(message, "\"out\\x1b[2J{aggregate_type}\""));
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
}

// What the sink checks for every event: the rendered topic.
TEST(TopicProblem, NamesEachRule) {
  EXPECT_EQ(kafka::topic_problem("outbox.order"), "");
  EXPECT_EQ(kafka::topic_problem(std::string(249, 'a')), "");
  EXPECT_EQ(kafka::topic_problem("_single.underscore"), "");
  EXPECT_EQ(kafka::topic_problem(""), "is empty");
  EXPECT_EQ(kafka::topic_problem(std::string(250, 'a')),
            "is 250 characters long; Kafka allows at most 249");
  EXPECT_EQ(kafka::topic_problem(".."), "is \".\" or \"..\", which Kafka refuses");
  EXPECT_TRUE(contains(kafka::topic_problem("__consumer_offsets"), "internal topics"));
  EXPECT_TRUE(contains(kafka::topic_problem("a b"), "has the byte 0x20 at position 1"));
  EXPECT_TRUE(contains(kafka::topic_problem("caf\xc3\xa9"), "has the byte 0xc3 at position 3"));
}

TEST(MakeKafkaSink, RejectsDisablingIdempotence) {
  const std::string message = config_error_of(with_property("enable.idempotence", "false"));
  EXPECT_TRUE(contains(message, "enable.idempotence=false is refused"));
  EXPECT_TRUE(contains(message, "outbox always sets enable.idempotence=true"));
}

TEST(MakeKafkaSink, RejectsAcksOne) {
  EXPECT_TRUE(contains(config_error_of(with_property("acks", "1")), "acks=1 is refused"));
}

TEST(MakeKafkaSink, RejectsAcksZero) {
  EXPECT_TRUE(contains(config_error_of(with_property("acks", "0")), "acks=0 is refused"));
}

TEST(MakeKafkaSink, RejectsRequestRequiredAcksOne) {
  EXPECT_TRUE(contains(config_error_of(with_property("request.required.acks", "1")),
                       "request.required.acks=1 is refused"));
}

// Each was accepted before and weakened a guarantee: random scattered one aggregate over
// partitions, a transactional.id failed every send, LIFO reordered, 0 never timed out.
TEST(MakeKafkaSink, RejectsEveryPropertyThatWeakensAGuarantee) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"partitioner", "random"},
      {"transactional.id", "outbox-1"},
      {"queuing.strategy", "lifo"},
      {"message.timeout.ms", "0"},
      {"delivery.timeout.ms", "0"}};
  for (const auto& [key, value] : refused) {
    EXPECT_TRUE(contains(config_error_of(with_property(key, value)), "is refused")) << key;
  }
  for (const char* partitioner :
       {"consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"}) {
    EXPECT_TRUE(accepted(with_property("partitioner", partitioner))) << partitioner;
  }
}

// Issue 23, item 1: the same properties under librdkafka's "topic." prefix or an alias reached
// the default topic configuration past a check of the names (random scattered one key's 40 events
// over 4 partitions). What is checked now is what librdkafka will apply.
TEST(MakeKafkaSink, RejectsTheSamePropertiesUnderATopicPrefixOrAnAlias) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"topic.partitioner", "random"},
      {"topic.queuing.strategy", "lifo"},
      {"topic.message.timeout.ms", "0"},
      {"topic.delivery.timeout.ms", "0"},
      {"topic.acks", "1"},
      {"topic.request.required.acks", "0"}};
  for (const auto& [key, value] : refused) {
    const std::string message = config_error_of(with_property(key, value));
    EXPECT_TRUE(contains(message, "Kafka property " + key + "=" + value + " is refused"))
        << message;
  }
  EXPECT_TRUE(contains(config_error_of(with_property("topic.partitioner", "random")),
                       "librdkafka applies it as partitioner=random"));
  KafkaSinkOptions options = with_property("topic.message.timeout.ms", "600000");
  options.max_message_timeout = std::chrono::milliseconds(30000);
  EXPECT_TRUE(contains(config_error_of(options), "below the lease"));
  // The last property that sets it wins, as in librdkafka.
  options = with_property("partitioner", "murmur2");
  options.properties["topic.partitioner"] = "murmur2_random";
  EXPECT_TRUE(accepted(options));
  EXPECT_TRUE(accepted(with_property("topic.partitioner", "fnv1a")));
  // A value longer than any fixed buffer still reads back as itself.
  EXPECT_TRUE(contains(config_error_of(with_property("transactional.id", std::string(3000, 't'))),
                       "is refused"));
  EXPECT_TRUE(accepted(with_property("topic.message.timeout.ms", "5000")));
}

TEST(MakeKafkaSink, RejectsAMessageTimeoutThatOutlivesTheLease) {
  KafkaSinkOptions options = with_property("message.timeout.ms", "30000");
  options.max_message_timeout = std::chrono::milliseconds(30000);
  EXPECT_TRUE(contains(config_error_of(options), "below the lease"));
  options.properties["message.timeout.ms"] = "29999";
  EXPECT_TRUE(accepted(options));
  // The default (20 s) against a short lease.
  options.properties.clear();
  options.max_message_timeout = std::chrono::milliseconds(10000);
  EXPECT_TRUE(contains(config_error_of(options), "message.timeout.ms=20000 is refused"));
}

// A misspelt secret's value is a secret all the same: an unknown property's value is not shown.
TEST(MakeKafkaSink, RejectsUnknownPropertyWithoutEchoingItsValue) {
  const std::string message = config_error_of(with_property("sasl.pasword", "PLANTED-SECRET"));
  EXPECT_TRUE(contains(message, "sasl.pasword")) << message;
  EXPECT_FALSE(contains(message, "PLANTED-SECRET")) << message;
  EXPECT_TRUE(contains(config_error_of(with_property("no.such.property", "1")),
                       "No such configuration property"));
}

TEST(MakeKafkaSink, RejectsInvalidPropertyValue) {
  EXPECT_TRUE(contains(config_error_of(with_property("linger.ms", "soon")),
                       "Kafka property linger.ms=soon"));
}

TEST(MakeKafkaSink, RejectsPropertiesContradictingIdempotenceAsConfigError) {
  EXPECT_TRUE(
      contains(config_error_of(with_property("max.in.flight.requests.per.connection", "10")),
               "max.in.flight"));
  EXPECT_TRUE(contains(config_error_of(with_property("retries", "0")), "retries"));
}

// --- make_kafka_sink: valid configurations ---

TEST(MakeKafkaSink, ValidOptionsConstructWithoutABroker) {
  std::unique_ptr<Sink> sink;
  ASSERT_NO_THROW(sink = make_kafka_sink(valid_options()));
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->in_flight(), 0U);
  EXPECT_EQ(sink->describe(), "kafka(127.0.0.1:1)");
}

TEST(MakeKafkaSink, AcceptsPropertiesThatKeepTheGuarantees) {
  KafkaSinkOptions options = valid_options();
  options.topic_template = "{aggregate_type}.{event_type}";
  options.properties = {{"enable.idempotence", "true"},
                        {"acks", "all"},
                        {"request.required.acks", "-1"},
                        {"linger.ms", "5"},
                        {"client.id", "outbox-unit-test"}};
  EXPECT_NO_THROW(make_kafka_sink(options));
}

TEST(MakeKafkaSink, AcceptsEveryLegalTopicCharacter) {
  KafkaSinkOptions options = valid_options();
  options.topic_template = "AZaz09._-{event_type}";
  EXPECT_NO_THROW(make_kafka_sink(options));
}

// --- DeliveryOutcome ---

TEST(DeliveryOutcomeToString, NamesEveryOutcome) {
  EXPECT_STREQ(to_string(DeliveryOutcome::published), "published");
  EXPECT_STREQ(to_string(DeliveryOutcome::retryable_failure), "retryable_failure");
  EXPECT_STREQ(to_string(DeliveryOutcome::permanent_failure), "permanent_failure");
  EXPECT_STREQ(to_string(DeliveryOutcome::unknown), "unknown");
}

TEST(DeliveryOutcomeToString, ValueOutsideTheEnumIsAQuestionMark) {
  EXPECT_STREQ(to_string(static_cast<DeliveryOutcome>(99)), "?");
}

}  // namespace
}  // namespace outbox
