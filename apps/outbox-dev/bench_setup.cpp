// `outbox-dev bench`: the schemas each scenario runs in, the backlog, the relays' command line.

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "bench.hpp"
#include "bench_processes.hpp"
#include "outbox/error.hpp"
#include "outbox/testing/rabbitmq_server.hpp"
#include "workload.hpp"

namespace outbox::cli::bench {
namespace {

using namespace std::chrono_literals;

// The schema's CDC slots and publications (one of each per shard), if a CDC scenario left them:
// a slot nobody reads keeps WAL from being recycled. A slot may still be active for a moment after
// its relay stopped.
void drop_cdc_leftovers(PGconn* conn, const SchemaName& schema) {
  const std::string slot = Setup::slot_name(schema);
  const std::string sql =
      "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
      "WHERE starts_with(slot_name::text, $1) AND NOT active";
  for (int i = 0; i < 100; ++i) {
    pg::exec(conn, sql, {slot.c_str()});
    if (pg::exec(conn, "SELECT 1 FROM pg_replication_slots WHERE starts_with(slot_name::text, $1)",
                 {slot.c_str()})
            .rows() == 0) {
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  const std::string publication = schema.name() + "_outbox";
  const auto publications = pg::exec(
      conn, "SELECT pubname::text FROM pg_publication WHERE starts_with(pubname::text, $1)",
      {publication.c_str()});
  for (int row = 0; row < publications.rows(); ++row) {
    pg::exec(conn, fmt::format("DROP PUBLICATION IF EXISTS \"{}\"", publications.text(row, 0)));
  }
}

}  // namespace

RelaySource parse_source(const std::string& name) {
  if (name == "polling") return RelaySource::polling;
  if (name == "cdc") return RelaySource::cdc;
  throw InvalidArgument("bench: unknown relay source \"" + name + "\"; use polling or cdc");
}

const char* source_name(RelaySource source) {
  return source == RelaySource::cdc ? "cdc" : "polling";
}

pg::Connection Setup::connect() const { return pg::Connection::open(url, "outbox-bench"); }

void Setup::drop_schema(const SchemaName& schema) const {
  auto c = connect();
  pg::exec(c.get(), "SET client_min_messages = warning");
  drop_cdc_leftovers(c.get(), schema);
  pg::exec(c.get(), "DROP SCHEMA IF EXISTS " + schema.quoted() + " CASCADE");
}

SchemaName Setup::fresh_schema(const std::string& name) const {
  const SchemaName schema(name);
  drop_schema(schema);
  auto c = connect();
  migrate(c.get(), schema);
  workload::create_tables(c.get(), schema);
  pg::exec(c.get(), fmt::format(R"SQL(
-- UUIDv7 as the producer makes them (time first), so the backlog has the producer's key order.
CREATE FUNCTION {s}.uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(set_byte(overlay(uuid_send(gen_random_uuid())
           PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                             FROM 3) FROM 1 FOR 6), 6,
           (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid $$;
)SQL",
                                fmt::arg("s", schema.quoted())));
  if (kafka) kafka->create_topic(topic(schema), 6, 1);
  return schema;
}

void Setup::load_backlog(const SchemaName& schema) const {
  auto c = connect();
  const std::int64_t events = options.events;
  const std::int64_t aggregates = std::min<std::int64_t>(options.aggregates, events);
  const int note = std::max(0, options.payload_bytes - 72);
  const auto started = Clock::now();
  constexpr std::int64_t kChunk = 100000;
  for (std::int64_t from = 0; from < events; from += kChunk) {
    const std::int64_t to = std::min(events, from + kChunk) - 1;
    pg::exec(c.get(),
             fmt::format(R"SQL(
INSERT INTO {events} (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
                      payload)
SELECT {s}.uuid_v7(), 'order', 'order-' || (i % {a}), i / {a} + 1, 'OrderPlaced',
       jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 997),
                          'total_cents', (i * 7919) % 100000, 'note', repeat('x', {note}))
FROM generate_series({from}::bigint, {to}::bigint) i ORDER BY i)SQL",
                         fmt::arg("events", schema.table("outbox_events")),
                         fmt::arg("s", schema.quoted()), fmt::arg("a", aggregates),
                         fmt::arg("note", note), fmt::arg("from", from), fmt::arg("to", to)));
    progress(fmt::format("loading backlog into {}: {}/{} events, {:.0f} s", schema.name(), to + 1,
                         events, seconds_since(started)));
  }
  pg::exec(c.get(), fmt::format(R"SQL(
INSERT INTO {seq} (aggregate_type, aggregate_id, last_sequence)
SELECT aggregate_type, aggregate_id, max(aggregate_sequence) FROM {events}
GROUP BY aggregate_type, aggregate_id)SQL",
                                fmt::arg("seq", schema.table("outbox_aggregate_sequences")),
                                fmt::arg("events", schema.table("outbox_events"))));
  pg::exec(c.get(), "VACUUM ANALYZE " + schema.table("outbox_events"));
  pg::exec(c.get(), "CHECKPOINT");
}

void Setup::load_table_less_backlog(const SchemaName& schema) const {
  auto c = connect();
  const std::int64_t events = options.events;
  const std::int64_t aggregates = std::min<std::int64_t>(options.aggregates, events);
  const int note = std::max(0, options.payload_bytes - 72);
  const std::string prefix = schema.message_prefix();
  const auto started = Clock::now();
  // Event i: aggregate i % aggregates, sequence i / aggregates + 1, as load_backlog; one
  // transaction per sequence, in which each counter moves to it once and vouches for one message
  // (relay/cdc/sequence_witness.hpp).
  for (std::int64_t from = 0; from < events; from += aggregates) {
    const std::int64_t to = std::min(events, from + aggregates) - 1;
    pg::exec(c.get(), "BEGIN");
    pg::exec(c.get(),
             fmt::format(R"SQL(
INSERT INTO {seq} AS q (aggregate_type, aggregate_id, last_sequence)
SELECT 'order', 'order-' || (i % {a}), i / {a} + 1
FROM generate_series({from}::bigint, {to}::bigint) i
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = EXCLUDED.last_sequence)SQL",
                         fmt::arg("seq", schema.table("outbox_aggregate_sequences")),
                         fmt::arg("a", aggregates), fmt::arg("from", from), fmt::arg("to", to)));
    pg::exec(c.get(),
             fmt::format(R"SQL(
SELECT count(pg_logical_emit_message(true, $1, json_build_object(
  'xid', pg_current_xact_id()::text, 'occurred_at', now()::text,
  'aggregate_type', 'order', 'aggregate_id', 'order-' || (i % {a}),
  'events', json_build_array(json_build_object(
     'event_id', {s}.uuid_v7(), 'sequence', i / {a} + 1, 'event_type', 'OrderPlaced',
     'schema_version', 1, 'headers', '{{}}',
     'payload', jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 997),
                                   'total_cents', (i * 7919) % 100000,
                                   'note', repeat('x', {note}))::text)))::text))
FROM generate_series({from}::bigint, {to}::bigint) i)SQL",
                         fmt::arg("s", schema.quoted()), fmt::arg("a", aggregates),
                         fmt::arg("note", note), fmt::arg("from", from), fmt::arg("to", to)),
             {prefix.c_str()});
    pg::exec(c.get(), "COMMIT");
    if (to + 1 == events || (to + 1) / 100000 != from / 100000) {
      progress(fmt::format("loading table-less backlog into {}: {}/{} events, {:.0f} s",
                           schema.name(), to + 1, events, seconds_since(started)));
    }
  }
  pg::exec(c.get(), "CHECKPOINT");
}

std::vector<std::string> Setup::relay_args(const SchemaName& schema, bool discard, int index,
                                           RelaySource source, bool table_less) const {
  std::vector<std::string> args{self,
                                "relay",
                                "--db",
                                url,
                                "--schema",
                                schema.name(),
                                "--relay-id",
                                fmt::format("bench-{}-{}", schema.name(), index + 1),
                                "--stats-every",
                                "250ms",
                                "--stats-format",
                                "json",
                                "--batch-size",
                                std::to_string(options.batch_size),
                                "--max-in-flight",
                                std::to_string(options.max_in_flight)};
  if (options.durable_marks) args.emplace_back("--durable-marks");
  if (source == RelaySource::cdc) {
    args.insert(args.end(), {"--source", "cdc", "--slot", slot_name(schema), "--shards",
                             std::to_string(options.cdc_shards)});
    if (table_less) args.emplace_back("--table-less");
  }
  if (discard) {
    args.insert(args.end(), {"--sink", "discard"});
  } else if (!nats_url.empty()) {
    // A stream per scenario's schema, created by the first relay: file storage, as in production.
    args.insert(args.end(),
                {"--sink", "nats", "--nats-servers", nats_url, "--nats-stream",
                 "BENCH_" + schema.name(), "--nats-subject-template",
                 schema.name() + ".{aggregate_type}.{partition}", "--nats-create-stream"});
  } else if (rabbitmq != nullptr) {
    // An exchange per scenario's schema with a quorum queue bound to it (no consumer: the bench
    // measures the relay's side, the queue keeps what it confirmed).
    const std::string exchange = "bench." + schema.name();
    rabbitmq->declare_queue(exchange, exchange + ".all", "#");
    args.insert(args.end(), {"--sink", "rabbitmq", "--rabbitmq-url", rabbitmq->url(),
                             "--rabbitmq-exchange", exchange});
  } else if (!redis_url.empty()) {
    // Streams per scenario's schema (no consumer group: nothing to trim, the streams keep what
    // was acknowledged).
    args.insert(args.end(), {"--sink", "redis", "--redis-url", redis_url, "--redis-stream-template",
                             schema.name() + ":{aggregate_type}:{partition}"});
  } else if (!http_url.empty()) {
    args.insert(args.end(), {"--sink", "http", "--http-url",
                             http_url + "/hooks/{aggregate_type}/{aggregate_id}",
                             "--http-max-connections-per-host", "64"});
  } else {
    args.insert(args.end(), {"--kafka-brokers", brokers, "--topic-template",
                             schema.name() + ".{aggregate_type}"});
    for (const std::string& property : options.kafka_properties) {
      args.insert(args.end(), {"--kafka-property", property});
    }
  }
  return args;
}

void Setup::create_slot(const SchemaName& schema, bool table_less) const {
  RelayProcess relay(relay_args(schema, true, 0, RelaySource::cdc, table_less),
                     (out / fmt::format("relay-{}-slot.log", schema.name())).string());
  auto c = connect();
  const std::string slot = slot_name(schema);
  for (int i = 0; i < 300; ++i) {  // 30 s
    if (pg::exec(c.get(),
                 "SELECT 1 FROM pg_replication_slots WHERE starts_with(slot_name::text, $1) "
                 "AND active",
                 {slot.c_str()})
            .rows() == static_cast<int>(options.cdc_shards)) {
      relay.stop();
      return;
    }
    if (!relay.running()) break;
    std::this_thread::sleep_for(100ms);
  }
  throw Error(
      fmt::format("bench: the CDC relay did not make its slot {}; see {}", slot, relay.log_path()));
}

}  // namespace outbox::cli::bench
