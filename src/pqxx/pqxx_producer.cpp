#include <fmt/format.h>

#include <pqxx/except>
#include <pqxx/nontransaction>
#include <pqxx/prepared_statement>
#include <pqxx/result>

#include "outbox/error.hpp"
#include "outbox/pqxx.hpp"
#include "producer/commit_resolution.hpp"

namespace outbox {

namespace {

// The SQL function's answer: the sequence and the transaction's id (EnqueuedEvent's fields).
// The size limit is set for the transaction in the same statement, before the call (the call's
// first argument depends on it): also right on a pqxx::nontransaction, where a set_config of its
// own would end with its own statement.
std::string call_statement(const SchemaName& schema) {
  return fmt::format(
      "SELECT e.aggregate_sequence, txid_current() FROM "
      "(SELECT set_config('outbox.max_message_bytes', $10, true) AS applied) AS l, "
      "LATERAL {}.enqueue(CASE WHEN l.applied IS NOT NULL THEN $1 END, $2, $3, $4::jsonb, "
      "$5::jsonb, $6::int, $7::bigint * interval '1 millisecond', $8::uuid, $9) AS e",
      schema.quoted());
}

ProducerOptions checked(ProducerOptions options) {
  if (options.table_less) {
    throw InvalidArgument(
        "PqxxProducer: table-less events need the libpq producer (outbox::Producer); the SQL "
        "function writes rows");
  }
  return options;
}

// The headers to store: the caller's, with "traceparent" added by the function when given.
const char* traceparent_or_null(const NewEvent& event) {
  return event.traceparent.empty() ? nullptr : event.traceparent.c_str();
}

}  // namespace

PqxxProducer::PqxxProducer(ProducerOptions options)
    : options_(checked(std::move(options))),
      rules_(options_),
      statement_(call_statement(options_.schema)) {}

EnqueuedEvent PqxxProducer::enqueue(pqxx::transaction_base& tx, const NewEvent& event) const {
  return enqueue(tx, std::span<const NewEvent>(&event, 1)).front();
}

std::vector<EnqueuedEvent> PqxxProducer::enqueue(pqxx::transaction_base& tx,
                                                 std::span<const NewEvent> events) const {
  for (const NewEvent& event : events) rules_.validate(event);
  std::vector<EnqueuedEvent> enqueued;
  if (events.empty()) return enqueued;
  const std::string limit = std::to_string(options_.max_payload_bytes);
  for (const NewEvent& event : events) {
    EnqueuedEvent out;
    out.event_id = event.event_id.value_or(EventId::generate());
    const pqxx::row row = tx.exec_params1(
        statement_, event.aggregate_type, event.aggregate_id, event.event_type, event.payload,
        event.headers, event.schema_version, static_cast<long long>(event.deliver_after.count()),
        out.event_id.to_string(), traceparent_or_null(event), limit);
    out.aggregate_sequence = row[0].as<std::int64_t>();
    out.transaction_id = row[1].as<std::uint64_t>();
    enqueued.push_back(out);
  }
  return enqueued;
}

TransactionStatus resolve_commit(pqxx::connection_base& conn, const SchemaName& schema,
                                 const EnqueuedEvent& event, std::chrono::milliseconds timeout) {
  const detail::Ask ask = [&conn](const std::string& sql, const std::vector<std::string>& params) {
    pqxx::nontransaction tx(conn, "outbox resolve_commit");
    pqxx::result result;
    try {
      result = tx.exec_params(sql, pqxx::prepare::make_dynamic_params(params));
    } catch (const pqxx::sql_error& error) {
      throw DatabaseError(error.what(), error.sqlstate(), false);
    } catch (const pqxx::broken_connection& error) {
      throw DatabaseError(error.what(), "08006", true);
    }
    detail::Rows rows;
    for (const pqxx::row& row : result) {
      std::vector<detail::Cell> cells;
      for (const pqxx::field& field : row) {
        cells.push_back(field.is_null() ? detail::Cell() : detail::Cell(field.c_str()));
      }
      rows.push_back(std::move(cells));
    }
    return rows;
  };
  return detail::resolve_commit(ask, schema, event.transaction_id, event.event_id, timeout);
}

}  // namespace outbox
