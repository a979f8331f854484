// `outbox-dev bench --only ack`: the send→ack hop alone, at the live scenario's 1,000 events/s,
// through a bare librdkafka producer and through outbox's Kafka sink, with the same settings
// (acks=all, idempotence, linger.ms 0.5, --kafka-property) against the same broker, in
// alternating rounds: how much of the hop is outbox's own (docs/PERFORMANCE.md).

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>

#include <memory>
#include <thread>
#include <unordered_map>

#include "bench_clients.hpp"
#include "bench_scenarios.hpp"
#include "outbox/error.hpp"
#include "outbox/kafka_sink.hpp"

namespace outbox::cli::bench {

using nlohmann::json;

namespace {

constexpr double kRate = 1000;  // events/s, as `live` at its first default rate

std::string payload_of(int bytes) {
  return fmt::format(R"({{"order_id": 1, "note": "{}"}})",
                     std::string(static_cast<std::size_t>(std::max(0, bytes - 30)), 'x'));
}

std::map<std::string, std::string> properties_of(const Setup& setup) {
  std::map<std::string, std::string> properties;
  for (const std::string& property : setup.options.kafka_properties) {
    const auto eq = property.find('=');
    if (eq != std::string::npos) properties[property.substr(0, eq)] = property.substr(eq + 1);
  }
  return properties;
}

struct Timing {
  std::vector<Clock::time_point> sent;
  std::vector<double> ms;
};

// librdkafka alone: one producer, made once (its id, connections and the topic's metadata come
// with the warm-up round, as they do once in a relay's life).
class BareProducer {
 public:
  explicit BareProducer(const Setup& setup);
  ~BareProducer() { rd_kafka_destroy(producer_); }
  BareProducer(const BareProducer&) = delete;
  BareProducer& operator=(const BareProducer&) = delete;
  // One message every 1/kRate s, delivery reports served while it waits.
  std::vector<double> round(const Setup& setup, double seconds, const std::string& topic);

 private:
  Timing timing_;
  rd_kafka_t* producer_ = nullptr;
};

BareProducer::BareProducer(const Setup& setup) {
  char error[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  std::map<std::string, std::string> properties = {{"bootstrap.servers", setup.brokers},
                                                   {"enable.idempotence", "true"},
                                                   {"acks", "all"},
                                                   {"linger.ms", "0.5"}};
  for (const auto& [key, value] : properties_of(setup)) properties[key] = value;
  for (const auto& [key, value] : properties) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw ConfigError(fmt::format("bench ack: {}={}: {}", key, value, error));
    }
  }
  rd_kafka_conf_set_opaque(conf, &timing_);
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* t = static_cast<Timing*>(opaque);
    const auto index = reinterpret_cast<std::uintptr_t>(m->_private);
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      t->ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - t->sent[index]).count());
    }
  });
  producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
  if (producer_ == nullptr) throw Error(fmt::format("bench ack: {}", error));
}

std::vector<double> BareProducer::round(const Setup& setup, double seconds,
                                        const std::string& topic) {
  rd_kafka_t* producer = producer_;
  Timing& timing = timing_;
  timing = Timing{};
  const std::string payload = payload_of(setup.options.payload_bytes);
  const auto count = static_cast<std::size_t>(seconds * kRate);
  timing.sent.reserve(count);
  const auto started = Clock::now();
  for (std::size_t i = 0; i < count; ++i) {
    const auto due = started + std::chrono::microseconds(static_cast<long>(i * 1e6 / kRate));
    while (Clock::now() < due) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now());
      rd_kafka_poll(producer, static_cast<int>(std::max<long>(0, left.count())));
    }
    const std::string key = fmt::format("order-{}", i % 10000);
    timing.sent.push_back(Clock::now());
    rd_kafka_producev(
        producer, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<std::uintptr_t>(i))), RD_KAFKA_V_END);
    rd_kafka_poll(producer, 0);
  }
  rd_kafka_flush(producer, 10000);
  return timing.ms;
}

// outbox's Kafka sink, made once, driven as the relay's loop drives it: send, then poll its
// reports.
std::vector<double> sink_round(const Setup& setup, Sink* sink, double seconds) {
  const auto count = static_cast<std::size_t>(seconds * kRate);
  std::vector<Clock::time_point> sent(count);
  std::vector<double> ms;
  std::vector<DeliveryReport> reports;
  const auto take = [&](std::chrono::milliseconds wait) {
    reports.clear();  // poll appends
    sink->poll(wait, reports);
    for (const DeliveryReport& report : reports) {
      if (report.outcome == DeliveryOutcome::published) {
        ms.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - sent[report.ticket]).count());
      }
    }
  };
  Event event;
  event.aggregate_type = "order";
  event.event_type = "OrderPlaced";
  event.payload = payload_of(setup.options.payload_bytes);
  event.headers = "{}";
  const auto started = Clock::now();
  for (std::size_t i = 0; i < count; ++i) {
    const auto due = started + std::chrono::microseconds(static_cast<long>(i * 1e6 / kRate));
    while (Clock::now() < due) {
      take(std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()));
    }
    event.event_id = EventId::generate();
    event.aggregate_id = fmt::format("order-{}", i % 10000);
    event.aggregate_sequence = static_cast<std::int64_t>(i / 10000 + 1);
    sent[i] = Clock::now();
    sink->send(event, i);
    take(std::chrono::milliseconds(0));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (sink->in_flight() > 0 && Clock::now() < deadline) take(std::chrono::milliseconds(5));
  return ms;
}

json percentiles_json(std::vector<double> ms) {
  const std::size_t n = ms.size();
  const Percentiles p = percentiles(std::move(ms));
  return {{"acked", n}, {"p50_ms", p.p50}, {"p95_ms", p.p95}, {"p99_ms", p.p99}};
}

}  // namespace

json bench_ack(const Setup& setup) {
  const std::string topic = "bench_ack";
  KafkaSinkOptions options;
  options.brokers = setup.brokers;
  options.topic_template = topic;
  options.properties = properties_of(setup);
  const std::unique_ptr<Sink> sink = make_kafka_sink(options);
  BareProducer producer(setup);
  std::vector<double> bare, ours;
  producer.round(setup, 1.0, topic);  // warm-up: producer ids, connections, the topic's metadata
  sink_round(setup, sink.get(), 1.0);
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    const double seconds = setup.options.seconds / kRounds;
    const std::vector<double> a = producer.round(setup, seconds, topic);
    const std::vector<double> b = sink_round(setup, sink.get(), seconds);
    bare.insert(bare.end(), a.begin(), a.end());
    ours.insert(ours.end(), b.begin(), b.end());
    progress(fmt::format("ack: round {}/{}", round + 1, kRounds));
  }
  return {{"scenario", "ack"},
          {"offered_per_s", kRate},
          {"librdkafka", percentiles_json(std::move(bare))},
          {"outbox_sink", percentiles_json(std::move(ours))}};
}

}  // namespace outbox::cli::bench
