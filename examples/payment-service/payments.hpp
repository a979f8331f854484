#pragma once
// payment-service's parts: the inbox handler that turns an OrderPlaced into a charge to make
// (charges.cpp), the worker that makes it at the provider and records the outcome (worker.cpp).

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <outbox/consumed_event.hpp>
#include <outbox/producer.hpp>
#include <string>

namespace payments {

void create_tables(PGconn* conn);

// The inbox effect for the order service's events, in the inbox transaction: an OrderPlaced
// becomes a pending charge (its idempotency key: the OrderPlaced event's id) and a
// PaymentRequested event. Other event types are ignored.
void on_order_event(PGconn* tx, const outbox::ConsumedEvent& event,
                    const outbox::Producer& producer);

struct WorkerOptions {
  std::string database_url;
  std::string provider_url;  // http://host:port of the payment provider
  // Off for a provider that ignores Idempotency-Key: before any retry, the worker asks the
  // provider whether the charge exists (reconciliation) instead of sending it again.
  bool provider_idempotent = true;
  std::chrono::milliseconds provider_timeout{1000};
  // A claimed charge is tried again after this long if its worker died or its outcome stayed
  // unknown. Longer than the provider takes to finish a request it received, or a
  // reconciliation could miss a charge still being made.
  std::chrono::milliseconds lease{3000};
};

// Makes pending charges until `stop`: claims one (a committed lease), calls the provider with
// the charge's idempotency key, records succeeded or failed with PaymentSucceeded or
// PaymentFailed in one transaction. A timeout leaves it pending: tried again after the lease.
void run_worker(const WorkerOptions& options, const outbox::Producer& producer,
                const std::atomic<bool>& stop);

}  // namespace payments
