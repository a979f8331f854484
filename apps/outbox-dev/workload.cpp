#include "workload.hpp"

#include <fmt/format.h>

#include "pg/connection.hpp"

namespace outbox::cli::workload {

void create_tables(PGconn* conn, const SchemaName& schema) {
  pg::exec(conn, fmt::format(R"SQL(
CREATE TABLE {s}.orders (order_id bigint PRIMARY KEY, customer_id int NOT NULL,
                         total_cents bigint NOT NULL, note text NOT NULL,
                         status text NOT NULL DEFAULT 'placed', items int NOT NULL DEFAULT 0);
CREATE TABLE {s}.customers (customer_id int PRIMARY KEY, orders bigint NOT NULL);
INSERT INTO {s}.customers SELECT g, 0 FROM generate_series(0, {last}) g;
)SQL",
                             fmt::arg("s", schema.quoted()), fmt::arg("last", kCustomers - 1)));
}

Orders::Orders(PGconn* conn, const SchemaName& schema)
    : conn_(conn), orders_(schema.table("orders")), customers_(schema.table("customers")) {}

void Orders::place(std::int64_t order_id, int customer_id, std::int64_t total_cents,
                   const std::string& note) const {
  const std::string id = std::to_string(order_id);
  const std::string customer = std::to_string(customer_id);
  const std::string total = std::to_string(total_cents);
  pg::exec(conn_,
           "INSERT INTO " + orders_ +
               " (order_id, customer_id, total_cents, note) VALUES ($1, $2, $3, $4)",
           {id.c_str(), customer.c_str(), total.c_str(), note.c_str()});
  pg::exec(conn_, "UPDATE " + customers_ + " SET orders = orders + 1 WHERE customer_id = $1",
           {customer.c_str()});
}

void Orders::add_items(std::int64_t order_id, int items) const {
  pg::exec(conn_, "UPDATE " + orders_ + " SET items = items + $2 WHERE order_id = $1",
           {std::to_string(order_id).c_str(), std::to_string(items).c_str()});
}

void Orders::pay(std::int64_t order_id) const {
  pg::exec(conn_, "UPDATE " + orders_ + " SET status = 'paid' WHERE order_id = $1",
           {std::to_string(order_id).c_str()});
}

}  // namespace outbox::cli::workload
