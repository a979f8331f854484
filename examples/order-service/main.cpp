// order-service: the order half of the saga example (docs/PATTERNS.md). An HTTP API places and
// changes orders, each change and its outbox events in one transaction; `outbox relay` publishes
// them (topic outbox.order); an inbox consumer of the payment service's events (outbox.payment)
// confirms or cancels each order and announces that, again in one transaction.
//
// Usage: order-service CONNECTION BROKERS [PORT]
//   CONNECTION  libpq connection string of this service's database (its outbox schema "outbox")
//   BROKERS     Kafka bootstrap servers
//   PORT        HTTP port on 127.0.0.1 (default 8080; 0 picks a free one). The first line on
//               stdout is "order-service listening on http://127.0.0.1:PORT".

#include <httplib.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <outbox/fault_injection.hpp>
#include <outbox/kafka_consumer.hpp>
#include <outbox/schema.hpp>
#include <string>
#include <thread>

#include "../common/pg.hpp"
#include "orders.hpp"

namespace {

outbox::KafkaConsumerOptions consumer_options(const std::string& database_url,
                                              const std::string& brokers) {
  outbox::KafkaConsumerOptions options;
  options.brokers = brokers;
  options.group_id = "order-service";  // also the inbox's consumer name
  options.topics = {"outbox.payment"};
  options.database_url = database_url;
  options.schema = outbox::SchemaName("outbox");
  options.ordering.enabled =
      true;  // a payment's events are applied in their order, never k+1 first
  // A restarted instance gets the partitions of one that crashed after 6 s, not librdkafka's
  // default 45 s (the group waits that long for a member that stopped without leaving).
  options.properties["session.timeout.ms"] = "6000";
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: order-service CONNECTION BROKERS [PORT]\n";
    return 2;
  }
  const std::string database_url = argv[1];
  const int port = argc > 3 ? std::stoi(argv[3]) : 8080;
  // SIGINT and SIGTERM go to the thread that waits for them, not to a worker.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  try {
    outbox::arm_faults_from_environment();  // the crash campaign's points, when it arms them
    {
      const example::Connection conn = example::connect(database_url);
      outbox::migrate(conn.get(), outbox::SchemaName("outbox"));
      orders::create_tables(conn.get());
    }
    const outbox::Producer producer(
        outbox::ProducerOptions{.schema = outbox::SchemaName("outbox")});
    outbox::KafkaInboxConsumer consumer(
        consumer_options(database_url, argv[2]),
        [&producer](PGconn* tx, const outbox::ConsumedEvent& event) {
          orders::on_payment_event(tx, event, producer);
        });

    httplib::Server server;
    orders::add_routes(server, database_url, producer);
    const int bound = port == 0 ? server.bind_to_any_port("127.0.0.1")
                                : (server.bind_to_port("127.0.0.1", port) ? port : -1);
    if (bound < 0) throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(port));
    std::cout << "order-service listening on http://127.0.0.1:" << bound << std::endl;

    std::atomic<bool> stop{false};
    std::atomic<bool> inbox_failed{false};
    std::thread inbox([&] {
      try {
        while (!stop) consumer.poll(std::chrono::milliseconds(200));
      } catch (const std::exception& e) {  // a setting the consumer cannot work with
        std::cerr << "order-service: the payment events' consumer stopped: " << e.what() << "\n";
        inbox_failed = true;
        server.stop();
      }
    });
    std::thread signal_waiter([&] {
      int signal = 0;
      sigwait(&signals, &signal);
      stop = true;
      server.stop();
    });
    server.listen_after_bind();
    stop = true;
    inbox.join();
    pthread_kill(signal_waiter.native_handle(), SIGTERM);  // if the server stopped on its own
    signal_waiter.join();
    if (inbox_failed) return 1;
  } catch (const std::exception& e) {
    std::cerr << "order-service: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
