#pragma once
// The producer inside a libpqxx transaction (Debian's libpqxx 6.4), in its own library,
// outbox::pqxx, so programs on libpq alone do not link libpqxx:
//
//   pqxx::work tx(conn);
//   tx.exec_params("UPDATE orders SET status = 'paid' WHERE id = $1", id);   // the business change
//   const outbox::EnqueuedEvent e = producer.enqueue(tx, outbox::NewEvent{
//       .aggregate_type = "order", .aggregate_id = id, .event_type = "OrderPaid",
//       .payload = R"({"amount_cents": 4200})"});                         // the same transaction
//   tx.commit();                                                        // both or neither
//
// Each event is checked here first, by the libpq producer's rules (Producer::validate: a refused
// event throws InvalidArgument and leaves the transaction usable), then written by the schema's
// SQL function, <schema>.enqueue() (migration 16; docs/PRODUCING.md), which numbers it from the
// aggregate's counter under the same lock as every other producer. One round trip per event.
//
// When tx.commit() throws pqxx::in_doubt_error (the connection broke while COMMIT was in flight),
// call resolve_commit() below on a new connection with an event the transaction enqueued.

#include <chrono>
#include <pqxx/connection_base>
#include <pqxx/transaction_base>
#include <span>
#include <string>
#include <vector>

#include "outbox/producer.hpp"
#include "outbox/transaction.hpp"

namespace outbox {

class PqxxProducer {
 public:
  // Throws InvalidArgument for ProducerOptions::table_less (table-less events need the libpq
  // Producer). prepare_statements is not used: libpqxx sends each call as one unnamed statement.
  explicit PqxxProducer(ProducerOptions options = {});

  // Writes the events in `tx`, each aggregate's in the order given. Every event is checked before
  // anything is written. Throws InvalidArgument for an event the rules refuse (nothing written,
  // `tx` still usable), and libpqxx's exceptions for the database's errors (`tx` then aborted).
  EnqueuedEvent enqueue(pqxx::transaction_base& tx, const NewEvent& event) const;
  std::vector<EnqueuedEvent> enqueue(pqxx::transaction_base& tx,
                                     std::span<const NewEvent> events) const;

 private:
  ProducerOptions options_;
  Producer rules_;
  std::string statement_;
};

// Did the transaction that enqueued `event` commit? As resolve_commit(PGconn*, ...) in
// outbox/transaction.hpp: waits up to `timeout` for the transaction to end, then looks for the
// event. Run it on a connection other than the broken one, outside a transaction. Throws
// DatabaseError.
TransactionStatus resolve_commit(pqxx::connection_base& conn, const SchemaName& schema,
                                 const EnqueuedEvent& event,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace outbox
