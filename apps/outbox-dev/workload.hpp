#pragma once
// The business side of `outbox-dev demo` and `outbox-dev bench`: orders and the customers who place
// them, changed in the same transaction as the events that announce them.

#include <libpq-fe.h>

#include <cstdint>
#include <string>

#include "outbox/schema.hpp"

namespace outbox::cli::workload {

// Customers 0 .. kCustomers-1 exist from the start.
inline constexpr int kCustomers = 1000;

// In `schema` (which exists): orders (order_id bigint, customer_id int, total_cents bigint, note
// text, status text 'placed', items int 0) and customers (customer_id int, orders bigint).
void create_tables(PGconn* conn, const SchemaName& schema);

// The statements of an order's life, each for a transaction the caller has open on `conn`.
class Orders {
 public:
  Orders(PGconn* conn, const SchemaName& schema);

  // A new order (status placed, no items); its customer's order count goes up.
  void place(std::int64_t order_id, int customer_id, std::int64_t total_cents,
             const std::string& note) const;
  void add_items(std::int64_t order_id, int items) const;
  void pay(std::int64_t order_id) const;

 private:
  PGconn* conn_;
  std::string orders_;
  std::string customers_;
};

}  // namespace outbox::cli::workload
