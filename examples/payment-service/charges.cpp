// The first step of the payment side: an OrderPlaced applied by the inbox becomes a charge to
// make and a PaymentRequested event, in the transaction that records the OrderPlaced as applied.
// The provider is not called here: an HTTP call inside a database transaction would be repeated
// by every retry of the transaction, and hold its locks for as long as the provider takes.

#include <nlohmann/json.hpp>
#include <string>

#include "../common/pg.hpp"
#include "payments.hpp"

namespace payments {

void on_order_event(PGconn* tx, const outbox::ConsumedEvent& event,
                    const outbox::Producer& producer) {
  if (event.event_type != "OrderPlaced") return;
  const nlohmann::json order = nlohmann::json::parse(event.payload);
  const std::string order_id = order.at("order_id");
  const std::string amount = std::to_string(order.at("amount_cents").get<long long>());
  const std::string key = event.event_id.to_string();  // stable across redeliveries and replays
  const auto inserted =
      example::exec(tx,
                    "INSERT INTO charges (order_id, idempotency_key, amount_cents, card) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT (order_id) DO NOTHING",
                    {order_id, key, amount, order.at("card").get<std::string>()});
  if (example::affected(inserted) == 0) return;  // this order's charge exists already
  producer.enqueue(tx, outbox::NewEvent{.aggregate_type = "payment",
                                        .aggregate_id = order_id,
                                        .event_type = "PaymentRequested",
                                        .payload = nlohmann::json{
                                            {"order_id", order_id},
                                            {"amount_cents", std::stoll(amount)},
                                            {"idempotency_key",
                                             key}}.dump()});
  example::crash_point("payment.before_inbox_commit");
}

void create_tables(PGconn* conn) {
  example::exec(conn, "SET client_min_messages = warning");
  example::exec(conn,
                "CREATE TABLE IF NOT EXISTS charges ("
                " order_id text PRIMARY KEY, idempotency_key text NOT NULL UNIQUE,"
                " amount_cents bigint NOT NULL, card text NOT NULL,"
                " status text NOT NULL DEFAULT 'pending'"
                "   CHECK (status IN ('pending', 'succeeded', 'failed')),"
                " attempts int NOT NULL DEFAULT 0,"
                " next_attempt_at timestamptz NOT NULL DEFAULT now(),"
                " provider_charge_id text, failure_reason text,"
                " created_at timestamptz NOT NULL DEFAULT now(), settled_at timestamptz)");
}

}  // namespace payments
