// pqxx_order_service: the order service on libpqxx. It stores an order and enqueues an
// OrderPlaced event in one pqxx::work, so both commit or neither does; when the connection breaks
// during the COMMIT it asks, on a new connection, whether the transaction committed before
// placing the order again.
//
// Usage: pqxx_order_service [CONNECTION [SCHEMA]]
//   CONNECTION  libpq connection string or URI; default $OUTBOX_DATABASE_URL, else the PG*
//   variables SCHEMA      schema for outbox's tables and this example's orders table; default
//   "outbox"
// The schema must be migrated (`outbox migrate`): the producer calls its SQL function.

#include <cstdlib>
#include <iostream>
#include <outbox/pqxx.hpp>
#include <pqxx/pqxx>
#include <string>

int main(int argc, char** argv) {
  const char* env_url = std::getenv("OUTBOX_DATABASE_URL");
  const std::string database_url = argc > 1 ? argv[1] : (env_url != nullptr ? env_url : "");
  const outbox::SchemaName schema(argc > 2 ? argv[2] : "outbox");
  try {
    pqxx::connection conn(database_url);
    {
      pqxx::work ddl(conn);
      ddl.exec("CREATE TABLE IF NOT EXISTS " + schema.table("orders") +
               " (order_id bigserial PRIMARY KEY, customer_id text NOT NULL,"
               "  total_cents bigint NOT NULL)");
      ddl.commit();
    }
    // Immutable and thread safe: build one at start-up and share it.
    const outbox::PqxxProducer producer(outbox::ProducerOptions{.schema = schema});
    const std::string customer_id = "customer-42";

    pqxx::work tx(conn);
    const std::string order_id =
        tx.exec_params1("INSERT INTO " + schema.table("orders") +
                            " (customer_id, total_cents) VALUES ($1, 4200) RETURNING order_id",
                        customer_id)[0]
            .as<std::string>();
    const outbox::EnqueuedEvent event = producer.enqueue(
        tx, outbox::NewEvent{.aggregate_type = "customer",
                             .aggregate_id = customer_id,
                             .event_type = "OrderPlaced",
                             .payload = R"({"order_id":)" + order_id + R"(,"total_cents":4200})"});
    try {
      tx.commit();
    } catch (const pqxx::in_doubt_error&) {
      pqxx::connection again(database_url);
      const outbox::TransactionStatus status = outbox::resolve_commit(again, schema, event);
      std::cerr << "pqxx_order_service: the connection broke during COMMIT; the order "
                << outbox::to_string(status) << "\n";
      return status == outbox::TransactionStatus::committed ? 0 : 1;
    }
    std::cout << "order " << order_id << " placed: event " << event.event_id.to_string() << ", "
              << customer_id << " sequence " << event.aggregate_sequence << "\n";
  } catch (const outbox::Error& e) {
    std::cerr << "pqxx_order_service: " << e.what() << (e.retryable() ? " (retryable)" : "")
              << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "pqxx_order_service: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
