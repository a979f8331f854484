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
#include <unistd.h>

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
  // An effect that fails is tried again after at most 5 s, so one that always fails is parked
  // (park_failing_after, 10 failures) within about 20 s and its partition's other orders go on.
  options.retry_backoff_max = std::chrono::seconds(5);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: order-service CONNECTION BROKERS [PORT]\n";
    return 2;
  }
  const std::string database_url = argv[1];
  // SIGINT and SIGTERM go to the thread that waits for them, not to a worker.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  try {
    const int port = argc > 3 ? std::stoi(argv[3]) : 8080;
    outbox::arm_faults_from_environment();  // the crash campaign's points, when it arms them
    {
      const example::Connection conn = example::connect(database_url);
      outbox::migrate(conn.get(), outbox::SchemaName("outbox"));
      orders::create_tables(conn.get());
    }
    const outbox::Producer producer(
        outbox::ProducerOptions{.schema = outbox::SchemaName("outbox")});
    // run() retries a failing effect with backoff and, gap-aware, parks it after
    // park_failing_after failures; it reconnects to PostgreSQL and the brokers by itself.
    outbox::KafkaInboxConsumer consumer(
        consumer_options(database_url, argv[2]),
        [&producer](PGconn* tx, const outbox::ConsumedEvent& event) {
          orders::on_payment_event(tx, event, producer);
        });

    httplib::Server server;
    server.set_payload_max_length(64 * 1024);  // an order is a few hundred bytes
    orders::add_routes(server, database_url, producer);
    const int bound = port == 0 ? server.bind_to_any_port("127.0.0.1")
                                : (server.bind_to_port("127.0.0.1", port) ? port : -1);
    if (bound < 0) throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(port));
    std::cout << "order-service listening on http://127.0.0.1:" << bound << std::endl;

    std::atomic<int> exit_code{0};
    std::atomic<bool> listening{true};
    std::thread inbox = example::inbox_thread(consumer, "order-service", exit_code);
    std::thread signal_waiter([&] {
      int signal = 0;
      sigwait(&signals, &signal);
      consumer.request_stop();
      // A stop() before listen_after_bind() has started is lost: ask until it has returned.
      while (listening) {
        server.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    server.listen_after_bind();
    listening = false;
    kill(getpid(), SIGTERM);  // wakes the signal thread if the server ended on its own
    signal_waiter.join();
    inbox.join();
    return exit_code;
  } catch (const std::exception& e) {
    std::cerr << "order-service: " << e.what() << "\n";
    return 1;
  }
}
