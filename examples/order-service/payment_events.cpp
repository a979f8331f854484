// The end of the saga on the order's side. The inbox (KafkaInboxConsumer, gap-aware) runs this
// in the transaction that records the payment event as applied, so the order's new state, the
// event that announces it, and "this payment event is done" commit together: a redelivery finds
// the inbox row and runs nothing.

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "../common/pg.hpp"
#include "orders.hpp"

namespace orders {

void on_payment_event(PGconn* tx, const outbox::ConsumedEvent& event,
                      const outbox::Producer& producer) {
  const bool paid = event.event_type == "PaymentSucceeded";
  if (!paid && event.event_type != "PaymentFailed") return;  // PaymentRequested and newer types
  const nlohmann::json payment = nlohmann::json::parse(event.payload);
  const std::string order_id = payment.at("order_id");
  const std::string reason = paid ? "" : payment.value("reason", "payment failed");
  const char* wanted = paid ? "confirmed" : "cancelled";

  const auto order =
      example::exec(tx, "SELECT status FROM orders WHERE order_id = $1 FOR UPDATE", {order_id});
  if (example::rows(order) == 0) {
    // Thrown, so the inbox retries and then parks it: an operator sees it in `outbox inbox list`.
    throw std::runtime_error(event.event_type + " for an unknown order " + order_id);
  }
  const std::string status = example::value(order, 0, 0);
  if (status == wanted) return;  // already so: nothing to do, nothing to announce
  if (status != "pending") {
    throw std::runtime_error(event.event_type + " for order " + order_id + ", which is " + status +
                             ": needs an operator (a refund?), parked");
  }
  example::exec(tx,
                "UPDATE orders SET status = $2, reason = $3, updated_at = now() "
                "WHERE order_id = $1",
                {order_id, wanted, paid ? std::nullopt : std::optional<std::string>(reason)});
  nlohmann::json payload = {{"order_id", order_id}};
  if (paid) {
    payload["charge_id"] = payment.value("charge_id", "");
  } else {
    payload["reason"] = reason;  // the compensation: the order placed is undone
  }
  producer.enqueue(tx, outbox::NewEvent{.aggregate_type = "order",
                                        .aggregate_id = order_id,
                                        .event_type = paid ? "OrderConfirmed" : "OrderCancelled",
                                        .payload = payload.dump()});
}

}  // namespace orders
