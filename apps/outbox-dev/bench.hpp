#pragma once
// `outbox-dev bench`: what the scenarios share. The files:
//   bench.cpp            the flags and the order of the scenarios
//   bench_setup.cpp      schemas, the backlog, the relay's command line (this header's Setup)
//   bench_processes.cpp  child processes: relays started, read, paused and stopped; CPU time
//   bench_scenarios.cpp  producer, ceiling and drain (bench_live.cpp: live)
//   bench_clients.cpp    producer clients, closed or open loop
//   bench_report.cpp     the table, the machine, results.json
// The business transactions are the demo's too (workload.hpp).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "outbox/relay.hpp"
#include "outbox/schema.hpp"
#include "outbox/testing/kafka_mock.hpp"
#include "pg/connection.hpp"

namespace outbox {
class RabbitMqServer;
}

namespace outbox::cli::bench {

struct BenchOptions {
  std::string database_url;       // empty: embedded PostgreSQL
  std::string kafka_brokers;      // empty: embedded Kafka mock cluster
  std::int64_t events = 1000000;  // backlog size for ceiling and drain
  int aggregates = 10000;
  int payload_bytes = 200;
  std::string shared_buffers = "1GB";                  // embedded PostgreSQL only
  std::vector<std::string> kafka_properties;           // key=value, passed to each Kafka relay
  int clients = 4;                                     // producer connections (producer and live)
  double seconds = 10;                                 // per producer comparison and per live rate
  std::vector<int> rates = {1000, 5000};               // live offered rates; "max" always follows
  int relays = 2;                                      // relay processes for ceiling and drain
  std::size_t batch_size = RelayOptions{}.batch_size;  // relay
  std::size_t max_in_flight = RelayOptions{}.max_in_flight;  // relay
  int timeout_seconds = 900;                                 // per backlog
  std::vector<std::string> only;                             // scenarios to run; empty: all
  // Relay sources that ceiling, drain and live run with, each in turn ("polling", "cdc").
  std::vector<std::string> sources = {"polling", "cdc"};
  bool durable_marks = false;  // relays commit marks synchronously
  unsigned cdc_shards = 1;     // the CDC relay's streams (relay --shards)
  std::string sink = "kafka";  // kafka, nats (an embedded nats-server), or http (a receiver)
  std::string out_dir = "bench-results";
  std::string outbox_program;  // the relays' `outbox`; empty: the one beside outbox-dev
};

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Wall-clock seconds since the epoch: the clock PostgreSQL's now() reads too.
inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline void progress(const std::string& text) { std::cerr << "  " << text << std::endl; }

// Where the benchmark runs: its options, the database and brokers, this program (to start relays
// with), the results folder, and the embedded mock cluster when there is one.
struct Setup {
  const BenchOptions& options;
  std::string url;
  std::string brokers;
  std::string self;
  std::filesystem::path out;
  std::optional<KafkaMockCluster>& kafka;
  std::string http_url{};                    // with --sink http: the receiver's base URL
  std::string nats_url{};                    // with --sink nats: the embedded nats-server
  const RabbitMqServer* rabbitmq = nullptr;  // with --sink rabbitmq: the embedded node
  std::string redis_url{};                   // with --sink redis: the embedded redis-server
  int broker_group = 0;  // the embedded server's process group (its CPU is the broker's); 0: none

  [[nodiscard]] pg::Connection connect() const;

  // A fresh schema with outbox's tables, the workload's tables, and a time-ordered uuid function.
  // A scenario's tables go when it ends (drop_schema): their dead rows would be autovacuum's work
  // during the next scenario.
  [[nodiscard]] SchemaName fresh_schema(const std::string& name) const;
  void drop_schema(const SchemaName& schema) const;
  static std::string topic(const SchemaName& schema) { return schema.name() + ".order"; }

  // `events` events over `aggregates` aggregates, sequence-major (every aggregate's #1, then every
  // #2, ...), as interleaved traffic would leave them. Written by SQL in chunks: this is setup.
  void load_backlog(const SchemaName& schema) const;
  // The same backlog as table-less events (no rows: one transactional message per aggregate and
  // transaction, its counter moved in the same transaction, as a table-less producer writes),
  // sequence-major: one transaction per sequence over all aggregates, in chunks of 100,000 events.
  void load_table_less_backlog(const SchemaName& schema) const;

  // `outbox relay` for `schema`, with JSON stats every 250 ms; `discard`: --sink discard. A CDC
  // relay reads the slot slot_name(schema) through the publication the relay makes by default.
  [[nodiscard]] std::vector<std::string> relay_args(const SchemaName& schema, bool discard,
                                                    int index = 0,
                                                    RelaySource source = RelaySource::polling,
                                                    bool table_less = false) const;

  // A CDC relay's slot and publication made before anything is written (a CDC relay started once
  // and stopped), so that the slot keeps what is written while no relay runs.
  // With `table_less`, the relay registers the slot for table-less events.
  void create_slot(const SchemaName& schema, bool table_less = false) const;
  // The slot of a CDC relay on `schema` (one per schema: only one relay streams per slot).
  static std::string slot_name(const SchemaName& schema) { return schema.name(); }
};

// "polling" or "cdc", as `outbox relay --source` and the results name them.
RelaySource parse_source(const std::string& name);
const char* source_name(RelaySource source);

}  // namespace outbox::cli::bench
