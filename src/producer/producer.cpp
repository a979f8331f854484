#include "outbox/producer.hpp"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/event_headers.hpp"
#include "common/fault.hpp"
#include "common/json_text.hpp"
#include "common/jsonb_scan.hpp"
#include "common/printable.hpp"
#include "outbox/transaction.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

constexpr std::size_t kMaxNameBytes = 255;

// Names end up in topic names, Kafka keys and headers, log lines and `outbox quarantine list`:
// refuse what a terminal would act on instead of showing (see common/printable.hpp).
void check_name(std::string_view field, const std::string& value) {
  if (value.empty()) {
    throw InvalidArgument(fmt::format("{} is empty; every event needs one", field));
  }
  if (value.size() > kMaxNameBytes) {
    throw InvalidArgument(
        fmt::format("{} is {} bytes; at most {} are allowed", field, value.size(), kMaxNameBytes));
  }
  if (const auto hostile = detail::find_hostile_character(value)) {
    if (hostile->what == "a NUL byte") {
      throw InvalidArgument(
          fmt::format("{} contains a NUL byte at byte {}, which PostgreSQL text "
                      "cannot hold",
                      field, hostile->offset));
    }
    if (hostile->what.starts_with("a byte that is not UTF-8")) {
      throw InvalidArgument(
          fmt::format("{} \"{}\" is not valid UTF-8 at byte {}: {}; send UTF-8 "
                      "text",
                      field, detail::printable(value), hostile->offset, hostile->what));
    }
    throw InvalidArgument(fmt::format(
        "{} \"{}\" contains {} at byte {}, which terminals and log viewers act on instead of "
        "showing; use printable characters",
        field, detail::printable(value), hostile->what, hostile->offset));
  }
}

// The two statements' common parts: synchronous_commit raised to on for the transaction, and
// the aggregate's next $3 sequences (its row locked until the transaction ends).
constexpr const char* kDurable =
    "  SELECT set_config('synchronous_commit', 'on', true) "
    "WHERE current_setting('synchronous_commit') = 'off'\n";

std::string sequence_upsert(const SchemaName& schema) {
  return "  INSERT INTO " + schema.table("outbox_aggregate_sequences") +
         " AS s (aggregate_type, aggregate_id, last_sequence)\n"
         "  VALUES ($1, $2, $3::bigint)\n"
         "  ON CONFLICT (aggregate_type, aggregate_id)\n"
         "  DO UPDATE SET last_sequence = s.last_sequence + EXCLUDED.last_sequence\n"
         "  RETURNING last_sequence\n";
}

// One statement per aggregate: take (or create) the aggregate's sequence row, which locks it until
// the caller's transaction ends, then insert the events numbered after it. Writers of the same
// aggregate therefore commit in sequence order, and a rolled-back writer leaves no gap because its
// increment rolls back with it.
//
// synchronous_commit=off would let the relay publish a commit that a server crash then loses
// (a phantom event), so a transaction that enqueues raises it to "on" for itself; stronger
// settings (remote_write, remote_apply) are kept.
//
// The statement also decides whether to wake relays (migrations 6 and 7): NOTIFY when some relay
// listens and none is awake. It records the decision in outbox.wake_checked for the rest of the
// transaction, so the table's statement trigger, there for rows other tools insert, skips its own
// PL/pgSQL check.
//
// `rows` is what the inserted rows are selected from: columns event_id, event_type,
// schema_version, payload, headers and ord (1, 2, ...: the order within the aggregate).
std::string insert_sql(const SchemaName& schema, const std::string& rows) {
  return fmt::format(R"SQL(WITH durable AS (
{durable}), wake AS (
  SELECT set_config('outbox.wake_checked', '{channel}', true),
         CASE WHEN (SELECT bool_and(r.listening) FROM {relays} r
                    WHERE r.seen_at > statement_timestamp() - interval '30 seconds')
              THEN pg_notify('{channel}', '') END
), seq AS (
{seq})
INSERT INTO {events} (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
                      schema_version, payload, headers, available_at)
SELECT e.event_id, $1, $2, seq.last_sequence - $3::bigint + e.ord, e.event_type,
       e.schema_version, e.payload, e.headers, now() + e.delay_ms * interval '1 millisecond'
FROM seq LEFT JOIN durable ON true LEFT JOIN wake ON true, {rows}
ORDER BY e.ord
RETURNING event_id, aggregate_sequence, txid_current())SQL",
                     fmt::arg("durable", kDurable), fmt::arg("seq", sequence_upsert(schema)),
                     fmt::arg("events", schema.table("outbox_events")),
                     fmt::arg("relays", schema.table("outbox_relays")),
                     fmt::arg("channel", schema.notify_channel()), fmt::arg("rows", rows));
}

// Table-less (ProducerOptions::table_less): the same sequence upsert, then one transactional
// message per statement instead of rows: the aggregate's events as a JSON array in order, each
// payload and headers as the text jsonb prints (what the relay sends from a row's payload::text),
// the transaction's id (the relay publishes nothing before the transaction is visible to other
// sessions) and now() as occurred_at in ISO 8601 (JSON's form: any session's DateStyle reads it).
// outbox_table_less_ready() raises unless a slot reads the message (migration 10); a session
// that passed it looks again only in the next second. No NOTIFY: a table-less relay streams.
std::string insert_table_less_sql(const SchemaName& schema, const std::string& rows) {
  return fmt::format(R"SQL(WITH durable AS (
{durable}), ready AS (
  SELECT CASE WHEN current_setting('outbox.table_less_checked', true) =
                   extract(epoch FROM statement_timestamp())::bigint::text
              THEN true ELSE {ready}() END AS ok
), seq AS (
{seq}), numbered AS (
  SELECT e.event_id, seq.last_sequence - $3::bigint + e.ord AS aggregate_sequence, e.event_type,
         e.schema_version, e.payload::text AS payload, e.headers::text AS headers, e.ord
  FROM seq LEFT JOIN durable ON true CROSS JOIN ready, {rows}
  WHERE ready.ok
), emitted AS (
  SELECT pg_logical_emit_message(true, '{prefix}', json_build_object(
           'xid', pg_current_xact_id()::text, 'occurred_at', to_json(now()) #>> '{{}}',
           'aggregate_type', $1::text, 'aggregate_id', $2::text,
           'events', json_agg(json_build_object(
              'event_id', n.event_id, 'sequence', n.aggregate_sequence,
              'event_type', n.event_type, 'schema_version', n.schema_version,
              'payload', n.payload, 'headers', n.headers) ORDER BY n.ord))::text) AS lsn
  FROM numbered n
)
SELECT n.event_id, n.aggregate_sequence, txid_current()
FROM numbered n CROSS JOIN emitted
ORDER BY n.ord)SQL",
                     fmt::arg("durable", kDurable), fmt::arg("seq", sequence_upsert(schema)),
                     fmt::arg("ready", schema.table("outbox_table_less_ready")),
                     fmt::arg("prefix", schema.message_prefix()), fmt::arg("rows", rows));
}

// Several events of one aggregate come as arrays; a lone event (the usual case) as plain
// parameters, which spares the array literal's escaping here and its parsing in PostgreSQL.
constexpr const char* kManyRows =
    "unnest($4::uuid[], $5::text[], $6::int[], $7::jsonb[], $8::jsonb[], $9::bigint[])\n"
    "          WITH ORDINALITY AS e(event_id, event_type, schema_version, payload, headers, "
    "delay_ms, ord)";
constexpr const char* kOneRow =
    "(VALUES ($4::uuid, $5::text, $6::int, $7::jsonb, $8::jsonb, $9::bigint, 1))\n"
    "          AS e(event_id, event_type, schema_version, payload, headers, delay_ms, ord)";

std::string insert_many_sql(const ProducerOptions& options) {
  if (options.table_less) return insert_table_less_sql(options.schema, kManyRows);
  return insert_sql(options.schema, kManyRows);
}

std::string insert_one_sql(const ProducerOptions& options) {
  if (options.table_less) return insert_table_less_sql(options.schema, kOneRow);
  return insert_sql(options.schema, kOneRow);
}

void check_transaction(PGconn* conn) {
  if (conn == nullptr) throw InvalidArgument("enqueue: the connection is null");
  switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
      // Payloads are sent as UTF-8 bytes; in another client encoding the server would
      // re-interpret them and store different text.
      if (PQclientEncoding(conn) != pg_char_to_encoding("UTF8")) {
        throw InvalidArgument(
            "enqueue needs client_encoding UTF8 on the connection (it is " +
            std::string(pg_encoding_to_char(PQclientEncoding(conn))) +
            "): set client_encoding=UTF8 in the connection string or SET client_encoding");
      }
      return;
    case PQTRANS_IDLE:
      throw InvalidArgument(
          "enqueue must run inside the caller's transaction (after BEGIN): outside one the event "
          "would commit apart from the business change");
    case PQTRANS_INERROR:
      throw InvalidArgument(
          "enqueue: the caller's transaction has already failed; roll it back and retry");
    case PQTRANS_ACTIVE:
      throw InvalidArgument("enqueue: the connection is busy with another command");
    case PQTRANS_UNKNOWN:
      throw InvalidArgument(
          "enqueue: the connection is broken; reconnect and retry the transaction");
  }
  throw InvalidArgument("enqueue: unknown connection state");
}

}  // namespace

namespace {

// W3C Trace Context, version 00 (and later versions' first four fields): lower-case hex,
// version not ff, trace id and parent id not all zeros. The caller's own "traceparent" header
// would be a second, conflicting value.
void check_traceparent(const NewEvent& event) {
  const std::string& t = event.traceparent;
  const auto hex = [&](std::size_t from, std::size_t n) {
    for (std::size_t i = from; i < from + n; ++i) {
      if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) return false;
    }
    return true;
  };
  const auto zeros = [&](std::size_t from, std::size_t n) {
    return t.compare(from, n, std::string(n, '0')) == 0;
  };
  const bool well_formed = t.size() == 55 && t[2] == '-' && t[35] == '-' && t[52] == '-' &&
                           hex(0, 2) && hex(3, 32) && hex(36, 16) && hex(53, 2) &&
                           t.compare(0, 2, "ff") != 0 && !zeros(3, 32) && !zeros(36, 16);
  if (!well_formed) {
    throw InvalidArgument(fmt::format(
        "traceparent of {} {} is \"{}\"; it must be a W3C trace context such as "
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 (lower-case hex, ids not all "
        "zeros)",
        event.event_type, event.aggregate_id, detail::printable(t, 80)));
  }
  const nlohmann::json headers = nlohmann::json::parse(event.headers, nullptr, false);
  if (headers.is_object() && headers.contains("traceparent") && headers["traceparent"] != t) {
    throw InvalidArgument(fmt::format(
        "{} {} has a traceparent and a different \"traceparent\" header; give one of them",
        event.event_type, event.aggregate_id));
  }
}

}  // namespace

Producer::Producer(ProducerOptions options)
    : options_(std::move(options)),
      insert_many_sql_(insert_many_sql(options_)),
      insert_one_sql_(insert_one_sql(options_)) {}

void Producer::validate(const NewEvent& event) const {
  check_name("aggregate_type", event.aggregate_type);
  check_name("aggregate_id", event.aggregate_id);
  check_name("event_type", event.event_type);
  if (event.schema_version < 1) {
    throw InvalidArgument(
        fmt::format("schema_version is {}; it must be 1 or more", event.schema_version));
  }
  const detail::JsonbScan payload = detail::scan_jsonb(event.payload);
  if (!payload.problem.empty()) {
    throw InvalidArgument(
        fmt::format("payload of {} {} {}", event.event_type, event.aggregate_id, payload.problem));
  }
  const detail::HeaderScan headers = detail::scan_header_object(event.headers);
  if (!headers.problem.empty()) {
    throw InvalidArgument(fmt::format("headers of {} {} {}", event.event_type, event.aggregate_id,
                                      detail::printable(headers.problem)));
  }
  if (!event.traceparent.empty()) check_traceparent(event);
  // What the relay will send: the payload as jsonb prints it (payload::text), not the caller's
  // text, which can be much shorter (1e999 is 5 bytes and prints as 1000 digits).
  const std::uint64_t header_bytes =
      detail::event_header_bytes(headers.message_bytes, event.traceparent, event.event_type,
                                 event.aggregate_type, event.schema_version);
  const std::uint64_t size =
      detail::kKafkaMessageFraming + event.aggregate_id.size() + payload.text_bytes + header_bytes;
  if (size > options_.max_payload_bytes) {
    const std::string as_written =
        payload.text_bytes == event.payload.size()
            ? std::string()
            : fmt::format(
                  " (the text given is {} bytes; jsonb stores it with a space after every "
                  "comma and colon, keeps one of repeated keys, decodes escapes and prints "
                  "numbers in full)",
                  event.payload.size());
    throw InvalidArgument(fmt::format(
        "{} {} would be a message of {} bytes: payload {} bytes as PostgreSQL's jsonb prints "
        "it{}, headers {}, key {}, Kafka's framing {}; the limit is {} "
        "(ProducerOptions::max_payload_bytes). Store large documents elsewhere and send a "
        "reference",
        event.event_type, event.aggregate_id, size, payload.text_bytes, as_written, header_bytes,
        event.aggregate_id.size(), detail::kKafkaMessageFraming, options_.max_payload_bytes));
  }
  if (event.event_id && event.event_id->is_nil()) {
    throw InvalidArgument("event_id is the nil UUID; leave it unset to get a fresh UUIDv7");
  }
  if (event.deliver_after.count() < 0 || event.deliver_after > kMaxDeliverAfter) {
    throw InvalidArgument(fmt::format(
        "deliver_after of {} {} is {} ms; it must be from 0 to {} days", event.event_type,
        event.aggregate_id, event.deliver_after.count(), kMaxDeliverAfter.count() / 24));
  }
  if (event.deliver_after.count() > 0 && options_.table_less) {
    throw InvalidArgument(
        "deliver_after needs the event's row (available_at): a table-less producer cannot delay "
        "an event; use a producer without table_less for delayed events");
  }
}

EnqueuedEvent Producer::enqueue(PGconn* conn, const NewEvent& event) const {
  return enqueue(conn, std::span<const NewEvent>(&event, 1)).front();
}

namespace {

// One insert statement per aggregate, with its text parameters, and the events it numbers.
struct AggregateInsert {
  std::vector<std::size_t> indexes;  // into the caller's events, in the caller's order
  std::string aggregate_type, aggregate_id, count;
  // A lone event goes as plain parameters (insert_one_sql), several as arrays (insert_many_sql).
  const NewEvent* lone = nullptr;
  std::string lone_id, lone_version, lone_headers, lone_delay;
  pg::ArrayLiteral ids, types, versions, payloads, headers, delays;

  [[nodiscard]] const std::string& sql(const std::string& one, const std::string& many) const {
    return lone != nullptr ? one : many;
  }
  // Closes the array literals: call once all events are added.
  [[nodiscard]] std::vector<const char*> params() {
    if (lone != nullptr) {
      return {aggregate_type.c_str(), aggregate_id.c_str(),     count.c_str(),
              lone_id.c_str(),        lone->event_type.c_str(), lone_version.c_str(),
              lone->payload.c_str(),  lone_headers.c_str(),     lone_delay.c_str()};
    }
    return {aggregate_type.c_str(),  aggregate_id.c_str(),   count.c_str(),
            ids.text().c_str(),      types.text().c_str(),   versions.text().c_str(),
            payloads.text().c_str(), headers.text().c_str(), delays.text().c_str()};
  }
};

// The events of one aggregate go to the server as one statement. PostgreSQL closes the
// connection on a message of 1 GB or more (a retryable-looking 08006 that can never succeed) and
// refuses a jsonb[] array whose stored form passes 1 GB (54000), which ~170 MB of text can reach
// since jsonb stores [1,1,...] in six times its text. kMaxEnqueueStatementBytes keeps far below.
void check_statement_size(std::span<const NewEvent> events, const std::vector<std::size_t>& group) {
  std::size_t bytes = 0;
  if (group.size() == 1) {
    const NewEvent& event = events[group.front()];
    bytes = event.payload.size() + event.headers.size() + event.event_type.size();
  } else {
    for (const std::size_t index : group) {
      const NewEvent& event = events[index];
      bytes += pg::array_element_bytes(event.payload) + pg::array_element_bytes(event.headers) +
               pg::array_element_bytes(event.event_type) + 36 + 12 + 5;  // id, version, commas
    }
  }
  const NewEvent& first = events[group.front()];
  bytes += first.aggregate_type.size() + first.aggregate_id.size();
  if (bytes <= kMaxEnqueueStatementBytes) return;
  if (group.size() == 1) {
    throw InvalidArgument(fmt::format(
        "{} {}: payload and headers as given are {} bytes; one event can be at most {} "
        "(kMaxEnqueueStatementBytes). Store large documents elsewhere and send a reference",
        first.event_type, first.aggregate_id, bytes, kMaxEnqueueStatementBytes));
  }
  throw InvalidArgument(fmt::format(
      "the {} events of aggregate {} {} in this call come to {} bytes, sent as one statement; at "
      "most {} can go in one (kMaxEnqueueStatementBytes: PostgreSQL refuses a message of 1 GB). "
      "Split the batch into several enqueue calls, in the same transaction if they must commit "
      "together",
      group.size(), first.aggregate_type, first.aggregate_id, bytes, kMaxEnqueueStatementBytes));
}

// The headers to store: the caller's, with "traceparent" added when the event carries one
// (validate() checked both).
std::string headers_with_trace(const NewEvent& event) {
  if (event.traceparent.empty()) return event.headers;
  nlohmann::json headers = nlohmann::json::parse(event.headers);
  headers["traceparent"] = event.traceparent;
  return headers.dump();
}

// Groups by aggregate, keeping the caller's order inside each group, and gives every event its
// id (the caller's or a fresh UUIDv7) in `enqueued`.
std::vector<AggregateInsert> plan_inserts(std::span<const NewEvent> events,
                                          std::vector<EnqueuedEvent>& enqueued) {
  std::map<std::pair<std::string_view, std::string_view>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < events.size(); ++i) {
    groups[{events[i].aggregate_type, events[i].aggregate_id}].push_back(i);
  }
  for (const auto& [aggregate, indexes] : groups) check_statement_size(events, indexes);
  enqueued.assign(events.size(), EnqueuedEvent{});
  std::vector<AggregateInsert> inserts(groups.size());
  std::size_t g = 0;
  for (const auto& [aggregate, indexes] : groups) {
    AggregateInsert& insert = inserts[g++];
    insert.indexes = indexes;
    insert.aggregate_type = aggregate.first;
    insert.aggregate_id = aggregate.second;
    insert.count = std::to_string(indexes.size());
    for (const std::size_t index : indexes) {
      enqueued[index].event_id = events[index].event_id.value_or(EventId::generate());
    }
    if (indexes.size() == 1) {
      insert.lone = &events[indexes.front()];
      insert.lone_id = enqueued[indexes.front()].event_id.to_string();
      insert.lone_version = std::to_string(insert.lone->schema_version);
      insert.lone_headers = headers_with_trace(*insert.lone);
      insert.lone_delay = std::to_string(insert.lone->deliver_after.count());
      continue;
    }
    for (const std::size_t index : indexes) {
      const NewEvent& event = events[index];
      insert.ids.add_plain(enqueued[index].event_id.to_string());
      insert.types.add(event.event_type);
      insert.versions.add_plain(std::to_string(event.schema_version));
      insert.payloads.add(event.payload);
      insert.headers.add(headers_with_trace(event));
      insert.delays.add_plain(std::to_string(event.deliver_after.count()));
    }
  }
  return inserts;
}

// Fills sequence and transaction id from one insert's RETURNING rows (in no promised order, so
// matched back by event id).
void take_returned(const AggregateInsert& insert, const pg::Result& result,
                   std::vector<EnqueuedEvent>& enqueued) {
  if (result.rows() != static_cast<int>(insert.indexes.size())) {
    throw DatabaseError(
        fmt::format("enqueue: expected {} rows back, got {}", insert.indexes.size(), result.rows()),
        "", false);
  }
  for (int row = 0; row < result.rows(); ++row) {
    const auto id = EventId::parse(result.text(row, 0));
    for (const std::size_t index : insert.indexes) {
      if (id && enqueued[index].event_id == *id) {
        enqueued[index].aggregate_sequence = result.int64(row, 1);
        enqueued[index].transaction_id = static_cast<std::uint64_t>(result.int64(row, 2));
      }
    }
  }
}

// A prepared statement the server no longer knows (26000): say which option runs the producer's
// statements unprepared, for when a transaction pooler keeps dropping them.
[[noreturn]] void rethrow_vanished(const DatabaseError& error) {
  throw DatabaseError(std::string(error.what()) +
                          " (the producer's option: ProducerOptions::prepare_statements = false)",
                      error.sqlstate(), error.retryable());
}

}  // namespace

std::vector<EnqueuedEvent> Producer::enqueue(PGconn* conn, std::span<const NewEvent> events) const {
  check_transaction(conn);
  for (const NewEvent& event : events) validate(event);
  std::vector<EnqueuedEvent> enqueued;
  for (AggregateInsert& insert : plan_inserts(events, enqueued)) {
    const auto params = insert.params();
    const std::string& sql = insert.sql(insert_one_sql_, insert_many_sql_);
    if (!options_.prepare_statements) {
      take_returned(insert, pg::exec(conn, sql, params), enqueued);
      continue;
    }
    try {
      take_returned(insert, pg::exec_prepared(conn, sql, params), enqueued);
    } catch (const DatabaseError& e) {
      if (e.sqlstate() == "26000") rethrow_vanished(e);
      throw;
    }
  }
  return enqueued;
}

EnqueuedEvent Producer::enqueue_and_commit(PGconn* conn, const NewEvent& event) const {
  return enqueue_and_commit(conn, std::span<const NewEvent>(&event, 1)).front();
}

std::vector<EnqueuedEvent> Producer::enqueue_and_commit(PGconn* conn,
                                                        std::span<const NewEvent> events) const {
  check_transaction(conn);
  for (const NewEvent& event : events) validate(event);
  std::vector<EnqueuedEvent> enqueued;
  std::vector<AggregateInsert> inserts = plan_inserts(events, enqueued);
  std::vector<pg::Statement> statements;
  for (AggregateInsert& insert : inserts) {
    statements.push_back({&insert.sql(insert_one_sql_, insert_many_sql_), insert.params()});
  }
  const int backend_pid = PQbackendPID(conn);
  OUTBOX_FAULT(fault::kProducerBeforeCommit);
  std::vector<pg::Result> results;
  try {
    results = pg::exec_then_commit(conn, statements, options_.prepare_statements);
  } catch (const OutcomeUnknown& e) {
    std::vector<EventId> ids;
    for (const EnqueuedEvent& event : enqueued) ids.push_back(event.event_id);
    throw CommitOutcomeUnknown(
        std::string(e.what()) +
            "; ask outbox::resolve_commit() on a new connection with this error before running "
            "the transaction again",
        std::move(ids), backend_pid);
  } catch (const DatabaseError& e) {
    if (e.sqlstate() == "26000") rethrow_vanished(e);
    throw;
  }
  OUTBOX_FAULT(fault::kProducerAfterCommit);
  for (std::size_t i = 0; i < inserts.size(); ++i) take_returned(inserts[i], results[i], enqueued);
  return enqueued;
}

}  // namespace outbox
