#pragma once
// `outbox-dev demo`: each broker's side of a run (the sink the relays publish with, the broker's
// inbox consumer, a replay of everything under the same inbox name).

#include <libpq-fe.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "outbox/consumed_event.hpp"
#include "outbox/schema.hpp"
#include "outbox/sink.hpp"

namespace outbox {
class RabbitMqServer;
class RedisServer;
}  // namespace outbox

namespace outbox::cli {

class Servers;

// What a run names its destinations after and applies with.
struct DemoRun {
  std::string prefix;  // topics, subjects, exchanges, streams: "outbox_demo", "outbox_demo_cdc"
  std::string nats_stream;  // "OUTBOX_DEMO", "OUTBOX_DEMO_CDC"
  SchemaName schema;
  std::function<void(PGconn*, const ConsumedEvent&)> effect;
};

// The consumer side of a run on one broker: the sink the relays publish with, and the broker's
// inbox consumer applying the run's effect.
struct DemoBroker {
  std::string name;  // for the report: "kafka", "nats", "rabbitmq"
  std::function<std::unique_ptr<Sink>()> make_sink;
  std::function<void()> run_consumer;   // until stop_consumer()
  std::function<void()> stop_consumer;  // from another thread
  std::function<std::uint64_t()> applied;
  std::function<std::uint64_t()> duplicates;
  // Reads everything again under the same inbox name (a new group or durable consumer); every
  // message must be a no-op. Returns that replay's duplicates.
  std::function<std::uint64_t(std::uint64_t committed)> replay;
};

DemoBroker kafka_broker(const std::string& url, Servers& servers, const DemoRun& run);
// NATS JetStream: a stream per run (created by the relays), a durable pull consumer.
DemoBroker nats_broker(const std::string& url, const std::string& servers, const DemoRun& run);
// RabbitMQ: an exchange per run, declared up front with the consumer's quorum queue and the
// replay's (a queue holds only what was routed after it was bound).
DemoBroker rabbitmq_broker(const std::string& url, const RabbitMqServer& server,
                           const DemoRun& run);
// Redis Streams: streams per run ("<prefix>:order:<partition>"), a consumer group; the replay is a
// second group.
DemoBroker redis_broker(const std::string& url, const RedisServer& server, const DemoRun& run);

}  // namespace outbox::cli
