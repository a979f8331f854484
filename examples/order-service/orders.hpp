#pragma once
// order-service's two halves: the HTTP API (orders_api.cpp) and the inbox handler that finishes
// the saga when the payment service answers (payment_events.cpp). Both write the business change
// and the outbox event in one transaction.

#include <libpq-fe.h>

#include <outbox/consumed_event.hpp>
#include <outbox/producer.hpp>
#include <string>

namespace httplib {
class Server;
}

namespace orders {

// The tables of this service (orders, idempotency_keys); idempotent, run at start-up.
void create_tables(PGconn* conn);

// POST /orders, PATCH /orders/{id}, GET /orders/{id} on `server`; each request on a connection
// of its own thread to `database_url`.
void add_routes(httplib::Server& server, const std::string& database_url,
                const outbox::Producer& producer);

// The inbox effect for the payment service's events, on the inbox transaction's connection:
// PaymentSucceeded confirms the order and emits OrderConfirmed, PaymentFailed cancels it and
// emits OrderCancelled (the compensation). Other event types are ignored (forward compatible).
void on_payment_event(PGconn* tx, const outbox::ConsumedEvent& event,
                      const outbox::Producer& producer);

}  // namespace orders
