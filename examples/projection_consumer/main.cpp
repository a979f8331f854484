// projection_consumer: reads the events the order services publish (topic outbox.customer) and
// keeps each customer's order count, every event applied exactly once: the effect and the inbox
// row that remembers the event commit in one transaction, and a redelivered event is skipped.
//
// Usage: projection_consumer CONNECTION BROKERS [STOP_AFTER]
//   CONNECTION  libpq connection string of the database with outbox's tables (schema "outbox")
//   BROKERS     Kafka bootstrap servers
//   STOP_AFTER  stop once this many events were taken, applied or skipped as duplicates (default:
//               run until SIGINT or SIGTERM)

#include <libpq-fe.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <outbox/kafka_consumer.hpp>
#include <stdexcept>
#include <string>

namespace {
volatile std::sig_atomic_t g_stop = 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: projection_consumer CONNECTION BROKERS [STOP_AFTER]\n";
    return 2;
  }
  const long stop_after = argc > 3 ? std::atol(argv[3]) : 0;
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });

  outbox::KafkaConsumerOptions options;
  options.brokers = argv[2];
  options.group_id = "projection";  // also the inbox's consumer name
  options.topics = {"outbox.customer"};
  options.database_url = argv[1];
  options.schema = outbox::SchemaName("outbox");
  // A new group starts at each partition's log start; an offset gone from the broker stops the
  // partition (OffsetGapPolicy::stop) rather than skip events silently.

  // The projection's table (once per deployment in real life).
  PGconn* setup = PQconnectdb(options.database_url.c_str());
  PQclear(PQexec(setup, "SET client_min_messages = warning"));  // no "already exists" notice
  PQclear(PQexec(setup,
                 "CREATE TABLE IF NOT EXISTS outbox.customer_orders"
                 " (customer_id text PRIMARY KEY, orders bigint NOT NULL)"));
  PQfinish(setup);

  try {
    // The effect: one statement on the inbox transaction's connection. Throwing rolls the whole
    // batch back; it is retried with backoff.
    outbox::KafkaInboxConsumer consumer(options, [](PGconn* tx, const outbox::ConsumedEvent& e) {
      if (e.event_type != "OrderPlaced") return;
      const char* params[] = {e.aggregate_id.c_str()};
      PGresult* r = PQexecParams(tx,
                                 "INSERT INTO outbox.customer_orders VALUES ($1, 1) "
                                 "ON CONFLICT (customer_id) DO UPDATE "
                                 "SET orders = customer_orders.orders + 1",
                                 1, nullptr, params, nullptr, nullptr, 0);
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      if (!ok) throw std::runtime_error(PQerrorMessage(tx));
    });
    while (g_stop == 0 &&
           (stop_after == 0 || consumer.stats().applied + consumer.stats().duplicates <
                                   static_cast<std::uint64_t>(stop_after))) {
      consumer.poll(std::chrono::milliseconds(500));
    }
    std::cout << "applied " << consumer.stats().applied << " event(s), "
              << consumer.stats().duplicates << " duplicate(s) skipped\n";
  } catch (const std::exception& e) {
    std::cerr << "projection_consumer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
