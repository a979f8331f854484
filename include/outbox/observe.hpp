#pragma once
// Serves what a relay and a consumer measure over HTTP, for Prometheus and for probes. Part of the
// outbox::observe target (prometheus-cpp's text format, cpp-httplib's server).
//
//   GET /metrics  Prometheus text format: every watched relay's and consumer's counters,
//                 histograms and health, and the database-wide backlog gauges (pending events,
//                 oldest pending age, quarantined events, by aggregate type), refreshed by one
//                 query at most every backlog_refresh.
//   GET /healthz  200 while no watched part has stopped; 503 once one has (restart the process).
//   GET /readyz   200 while every watched part is running (with none watched: while the backlog
//                 query works); 503 otherwise, the states and last errors in the body.
//
// docs/OPERATIONS.md lists every metric; docs/ops/alerts.yml alerts on them.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "outbox/kafka_consumer.hpp"
#include "outbox/relay.hpp"
#include "outbox/schema.hpp"

namespace outbox {

struct ObserveOptions {
  // "host:port" ("[::1]:9464" for IPv6); port 0 takes a free one (port() tells which). A host
  // that is not loopback (127.0.0.0/8, ::1, localhost) needs `token`.
  std::string listen = "127.0.0.1:9464";
  // Required with a non-loopback host, optional otherwise: every request but /healthz and
  // /readyz must then carry "Authorization: Bearer <token>". At least 16 characters.
  std::string token;
  // Where the backlog gauges come from (libpq connection string or URI; empty: the PG*
  // variables), and the outbox schema. backlog = false leaves them out (a consumer's process).
  bool backlog = true;
  std::string database_url;
  SchemaName schema;
  std::chrono::milliseconds backlog_refresh{5000};
};

// Thread safety: watch_*() before start(); the rest from any thread. The watched relay and
// consumer must outlive the server (stop() or destroy it first).
class ObserveServer {
 public:
  // Validates the options (ConfigError names what is wrong); binds nothing yet.
  explicit ObserveServer(ObserveOptions options);
  ~ObserveServer();  // stops
  ObserveServer(const ObserveServer&) = delete;
  ObserveServer& operator=(const ObserveServer&) = delete;

  // `shard` (empty: none) labels the relay's series, for a process that runs several relays.
  void watch_relay(const Relay& relay, std::string shard = {});
  // What a watched consumer reports at each scrape: its statistics, whatever its broker.
  struct ConsumerReading {
    std::vector<StatSample> samples;
    Health health = Health::starting;
    std::string last_error;
  };
  // `consumer` labels its series (the inbox's consumer name); `read` is called at each scrape.
  void watch_consumer(std::string consumer, std::function<ConsumerReading()> read);
  // Any broker's inbox consumer (Kafka, NATS, RabbitMQ, Redis): its stats() at each scrape.
  template <typename Consumer>
  void watch_consumer(std::string consumer, const Consumer& inbox_consumer) {
    watch_consumer(std::move(consumer), std::function<ConsumerReading()>([&inbox_consumer] {
                     const auto s = inbox_consumer.stats();
                     return ConsumerReading{stat_samples(s), s.health, s.last_error};
                   }));
  }

  // Binds and serves from a thread of its own. Throws ConfigError when the address cannot be
  // bound (in use, not this host's), naming it.
  void start();
  void stop() noexcept;
  [[nodiscard]] std::uint16_t port() const;

  // What GET /metrics answers (for tests and for embedding in another server).
  [[nodiscard]] std::string metrics_text();
  // Runs the backlog query now (not waiting out --backlog-refresh; but not sooner than ten times
  // the last run's duration after it, at most 60 s: a slow query's stretch holds) and waits up to
  // `timeout` for a run that began after this call, so what is served next reflects every change
  // committed before it. True also when that run failed (the gauges are then absent). False
  // when it timed out, when stopping, and without a backlog (options.backlog false, or not
  // started).
  bool refresh_backlog(std::chrono::milliseconds timeout);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" / "[v6]:port"; throws ConfigError naming `what` (e.g. "--metrics-listen")
// when it is not one. True for a loopback host.
struct ListenAddress {
  std::string host;
  std::uint16_t port = 0;
  [[nodiscard]] bool loopback() const;
};
ListenAddress parse_listen_address(const std::string& text, const std::string& what);

}  // namespace outbox
