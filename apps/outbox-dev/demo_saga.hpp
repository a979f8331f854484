#pragma once
// `outbox-dev demo --scenario saga` (demo_saga.cpp): the saga example end to end, with its
// invariant report.

#include <string>

namespace outbox::cli {

struct SagaDemoOptions {
  std::string database_url;   // empty: embedded PostgreSQL (databases saga_orders, saga_payments)
  std::string kafka_brokers;  // empty: embedded Kafka mock cluster
  int orders = 40;
  bool json = false;
  bool quiet = false;
};

// Runs it; returns 0 when every invariant holds, 1 otherwise. Throws for servers it cannot start.
int run_saga_demo(const SagaDemoOptions& options);

}  // namespace outbox::cli
