#include "demo_brokers.hpp"

#include <chrono>

#include "outbox/kafka.hpp"
#include "outbox/nats_consumer.hpp"
#include "outbox/nats_sink.hpp"
#include "outbox/rabbitmq_consumer.hpp"
#include "outbox/rabbitmq_sink.hpp"
#include "outbox/redis_consumer.hpp"
#include "outbox/redis_sink.hpp"
#include "outbox/testing/rabbitmq_server.hpp"
#include "outbox/testing/redis_server.hpp"
#include "servers.hpp"

namespace outbox::cli {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

DemoBroker kafka_broker(const std::string& url, Servers& servers, const DemoRun& run) {
  const std::string& prefix = run.prefix;
  if (auto& kafka = servers.kafka()) {
    kafka->create_topic(prefix + ".order", 6, 3);
    kafka->create_topic(prefix + ".customer", 3, 3);
  }
  KafkaConsumerOptions options;
  options.brokers = servers.brokers();
  options.group_id = "outbox-demo-projection-" + prefix;
  options.topics = {prefix + ".order", prefix + ".customer"};
  options.database_url = url;
  options.schema = run.schema;
  options.consumer_name = "projection";
  auto consumer = std::make_shared<KafkaInboxConsumer>(options, run.effect);
  const std::string brokers = servers.brokers();
  return DemoBroker{
      "kafka",
      [brokers, prefix] {
        return make_kafka_sink(KafkaSinkOptions{brokers, prefix + ".{aggregate_type}", {}});
      },
      [consumer] { consumer->run(); },
      [consumer] { consumer->request_stop(); },
      [consumer] { return consumer->stats().applied; },
      [consumer] { return consumer->stats().duplicates; },
      [options, effect = run.effect](std::uint64_t committed) {
        KafkaConsumerOptions again = options;
        again.group_id += "-replay";
        KafkaInboxConsumer replay(again, effect);
        const auto deadline = Clock::now() + 30s;
        while (replay.stats().received < committed && Clock::now() < deadline) replay.poll(200ms);
        return replay.stats().duplicates;
      }};
}

DemoBroker nats_broker(const std::string& url, const std::string& servers, const DemoRun& run) {
  const std::string& prefix = run.prefix;
  const std::string stream = run.nats_stream;
  NatsSinkOptions sink;
  sink.servers = servers;
  sink.stream = stream;
  sink.subject_template = prefix + ".{aggregate_type}.{partition}";
  sink.create_stream = true;
  NatsConsumerOptions options;
  options.servers = servers;
  options.stream = stream;
  options.durable = "projection";
  options.filter_subject = prefix + ".*.*";
  options.database_url = url;
  options.schema = run.schema;
  options.consumer_name = "projection";
  auto consumer = std::make_shared<std::unique_ptr<NatsInboxConsumer>>();
  return DemoBroker{"nats",
                    [sink] { return make_nats_sink(sink); },
                    [consumer, options, effect = run.effect] {
                      // The stream exists once a relay published: until then the consumer cannot
                      // bind.
                      *consumer = std::make_unique<NatsInboxConsumer>(options, effect);
                      (*consumer)->run();
                    },
                    [consumer] {
                      if (*consumer) (*consumer)->request_stop();
                    },
                    [consumer] { return *consumer ? (*consumer)->stats().applied : 0; },
                    [consumer] { return *consumer ? (*consumer)->stats().duplicates : 0; },
                    [options, effect = run.effect](std::uint64_t committed) {
                      NatsConsumerOptions again = options;
                      again.durable += "-replay";
                      NatsInboxConsumer replay(again, effect);
                      const auto deadline = Clock::now() + 30s;
                      while (replay.stats().received < committed && Clock::now() < deadline)
                        replay.poll(200ms);
                      return replay.stats().duplicates;
                    }};
}

DemoBroker rabbitmq_broker(const std::string& url, const RabbitMqServer& server,
                           const DemoRun& run) {
  const std::string& prefix = run.prefix;
  RabbitMqSinkOptions sink;
  sink.url = server.url();
  sink.exchange = prefix;
  sink.routing_key_template = "{aggregate_type}.{partition}";
  server.declare_queue(prefix, prefix + ".projection", "#");
  server.declare_queue(prefix, prefix + ".projection-replay", "#");
  RabbitMqConsumerOptions options;
  options.url = server.url();
  options.queue = prefix + ".projection";
  options.exchange = prefix;
  options.database_url = url;
  options.schema = run.schema;
  options.consumer_name = "projection";
  auto consumer = std::make_shared<RabbitMqInboxConsumer>(options, run.effect);
  return DemoBroker{"rabbitmq",
                    [sink] { return make_rabbitmq_sink(sink); },
                    [consumer] { consumer->run(); },
                    [consumer] { consumer->request_stop(); },
                    [consumer] { return consumer->stats().applied; },
                    [consumer] { return consumer->stats().duplicates; },
                    [options, effect = run.effect](std::uint64_t committed) {
                      RabbitMqConsumerOptions again = options;
                      again.queue += "-replay";
                      RabbitMqInboxConsumer replay(again, effect);
                      const auto deadline = Clock::now() + 30s;
                      while (replay.stats().received < committed && Clock::now() < deadline)
                        replay.poll(200ms);
                      return replay.stats().duplicates;
                    }};
}

DemoBroker redis_broker(const std::string& url, const RedisServer& server, const DemoRun& run) {
  RedisSinkOptions sink;
  sink.url = server.url();
  sink.stream_template = run.prefix + ":{aggregate_type}:{partition}";
  sink.partitions = 8;
  RedisConsumerOptions options;
  options.url = server.url();
  for (const char* type : {"order", "customer"}) {
    for (auto& stream : redis_streams(sink.stream_template, type, sink.partitions)) {
      options.streams.push_back(std::move(stream));
    }
  }
  options.group = "projection";
  options.consumer = "demo";
  options.database_url = url;
  options.schema = run.schema;
  options.consumer_name = "projection";
  auto consumer = std::make_shared<RedisInboxConsumer>(options, run.effect);
  return DemoBroker{"redis",
                    [sink] { return make_redis_sink(sink); },
                    [consumer] { consumer->run(); },
                    [consumer] { consumer->request_stop(); },
                    [consumer] { return consumer->stats().applied; },
                    [consumer] { return consumer->stats().duplicates; },
                    [options, effect = run.effect](std::uint64_t committed) {
                      RedisConsumerOptions again = options;
                      again.group += "-replay";
                      RedisInboxConsumer replay(again, effect);
                      const auto deadline = Clock::now() + 30s;
                      while (replay.stats().received < committed && Clock::now() < deadline)
                        replay.poll(200ms);
                      return replay.stats().duplicates;
                    }};
}

}  // namespace outbox::cli
