// payment-service: the payment half of the saga example (docs/PATTERNS.md). An inbox consumer of
// the order service's events (outbox.order) turns each OrderPlaced into a pending charge and a
// PaymentRequested event; a worker charges the card at the payment provider with the OrderPlaced
// event's id as the idempotency key and records PaymentSucceeded or PaymentFailed; `outbox
// relay` publishes those (outbox.payment) to the order service, which confirms or cancels.
//
// Usage: payment-service CONNECTION BROKERS PROVIDER_URL [--provider-without-idempotency]
//   CONNECTION    libpq connection string of this service's database (its outbox schema "outbox")
//   BROKERS       Kafka bootstrap servers
//   PROVIDER_URL  the payment provider, http://host:port (payment-provider-stub in the test)
//   --provider-without-idempotency   the provider ignores Idempotency-Key: reconcile before
//                                    any retry instead of sending the charge again

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
#include "payments.hpp"

int main(int argc, char** argv) {
  if (argc < 4 || (argc > 4 && std::string(argv[4]) != "--provider-without-idempotency")) {
    std::cerr << "usage: payment-service CONNECTION BROKERS PROVIDER_URL "
                 "[--provider-without-idempotency]\n";
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // taken by sigwait below, not by a worker
  const payments::WorkerOptions worker_options{
      .database_url = argv[1], .provider_url = argv[3], .provider_idempotent = argc == 4};
  try {
    outbox::arm_faults_from_environment();  // the crash campaign's points, when it arms them
    {
      const example::Connection conn = example::connect(worker_options.database_url);
      outbox::migrate(conn.get(), outbox::SchemaName("outbox"));
      payments::create_tables(conn.get());
    }
    const outbox::Producer producer(
        outbox::ProducerOptions{.schema = outbox::SchemaName("outbox")});
    outbox::KafkaConsumerOptions options;
    options.brokers = argv[2];
    options.group_id = "payment-service";  // also the inbox's consumer name
    options.topics = {"outbox.order"};
    options.database_url = worker_options.database_url;
    options.schema = outbox::SchemaName("outbox");
    options.ordering.enabled = true;  // an order's events in their order, never k+1 first
    // A restarted instance gets the partitions of one that crashed after 6 s, not librdkafka's
    // default 45 s (the group waits that long for a member that stopped without leaving).
    options.properties["session.timeout.ms"] = "6000";
    outbox::KafkaInboxConsumer consumer(options,
                                        [&producer](PGconn* tx, const outbox::ConsumedEvent& e) {
                                          payments::on_order_event(tx, e, producer);
                                        });
    std::cout << "payment-service running" << std::endl;

    std::atomic<bool> stop{false};
    std::atomic<int> exit_code{0};
    std::thread worker([&] { payments::run_worker(worker_options, producer, stop); });
    std::thread inbox = example::inbox_thread(consumer, "payment-service", exit_code);
    int signal = 0;
    sigwait(&signals, &signal);
    stop = true;
    consumer.request_stop();
    inbox.join();
    worker.join();
    return exit_code;
  } catch (const std::exception& e) {
    std::cerr << "payment-service: " << e.what() << "\n";
    return 1;
  }
}
