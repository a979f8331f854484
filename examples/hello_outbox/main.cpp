// hello_outbox: the smallest service that uses the outbox. It stores an order and enqueues an
// OrderPlaced event in one PostgreSQL transaction, so both commit or neither does; the relay
// (`outbox relay`) publishes the event to Kafka after the COMMIT.
//
// Usage: hello_outbox [CONNECTION [SCHEMA]]
//   CONNECTION  libpq connection string or URI; default $OUTBOX_DATABASE_URL, else the PG* variables
//   SCHEMA      schema for outbox's tables and this example's orders table; default "outbox"

#include <libpq-fe.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/event.hpp>
#include <outbox/producer.hpp>
#include <outbox/schema.hpp>

namespace {

using Connection = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

// Runs one parameterised statement and returns its result, or throws with the server's message
// when the result is not `expected`.
Result exec(PGconn* conn, const std::string& sql, ExecStatusType expected,
            const std::vector<std::string>& params = {}) {
  std::vector<const char*> values;
  for (const std::string& param : params) values.push_back(param.c_str());
  Result result(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0),
                &PQclear);
  if (PQresultStatus(result.get()) != expected) {
    std::string message = PQerrorMessage(conn);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw std::runtime_error(sql.substr(0, sql.find(' ')) + " failed: " + message);
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_url = std::getenv("OUTBOX_DATABASE_URL");
  const std::string database_url = argc > 1 ? argv[1] : (env_url != nullptr ? env_url : "");
  const std::string schema_name = argc > 2 ? argv[2] : "outbox";

  Connection conn(PQconnectdb(database_url.c_str()), &PQfinish);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    std::cerr << "hello_outbox: cannot connect: " << PQerrorMessage(conn.get());
    return 1;
  }

  try {
    // Once per deployment in real life; idempotent, so a service may also run it at start-up.
    const outbox::SchemaName schema(schema_name);
    outbox::migrate(conn.get(), schema);
    exec(conn.get(),
         "CREATE TABLE IF NOT EXISTS " + schema.table("orders") +
             " (order_id bigserial PRIMARY KEY, customer_id text NOT NULL,"
             "  total_cents bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
         PGRES_COMMAND_OK);

    // Immutable and thread safe: build one at start-up and share it.
    const outbox::Producer producer(outbox::ProducerOptions{.schema = schema});
    const std::string customer_id = "customer-42";

    exec(conn.get(), "BEGIN", PGRES_COMMAND_OK);
    try {
      const Result order = exec(conn.get(),
                                "INSERT INTO " + schema.table("orders") +
                                    " (customer_id, total_cents) VALUES ($1, $2) RETURNING order_id",
                                PGRES_TUPLES_OK, {customer_id, "4200"});
      const std::string order_id = PQgetvalue(order.get(), 0, 0);

      // The aggregate is the customer: the relay keys Kafka messages by aggregate_id, so one
      // customer's events stay in order, and each gets the next sequence of that customer.
      const outbox::EnqueuedEvent event = producer.enqueue(
          conn.get(), outbox::NewEvent{
                          .aggregate_type = "customer",
                          .aggregate_id = customer_id,
                          .event_type = "OrderPlaced",
                          .payload = R"({"order_id":)" + order_id + R"(,"total_cents":4200})",
                      });

      // If the connection breaks during COMMIT, the outcome is unknown: look the order up
      // before placing it again.
      exec(conn.get(), "COMMIT", PGRES_COMMAND_OK);
      std::cout << "order " << order_id << " placed: event " << event.event_id.to_string()
                << ", " << customer_id << " sequence " << event.aggregate_sequence << "\n";
    } catch (...) {
      PQclear(PQexec(conn.get(), "ROLLBACK"));  // nothing of the order or its event remains
      throw;
    }
  } catch (const outbox::Error& e) {
    std::cerr << "hello_outbox: " << e.what() << (e.retryable() ? " (retryable)" : "") << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "hello_outbox: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
