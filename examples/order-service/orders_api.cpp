// order-service's HTTP API. Every request that changes an order writes the order, its outbox
// events and (for POST) its idempotency record in ONE transaction: all of it commits or none.
//
//   POST  /orders        {"customer_id","amount_cents","card"}, header Idempotency-Key required:
//                        201 with the new order; the same key and body again answer the same
//                        201 (header Idempotent-Replayed: true) and create nothing; the same key
//                        with another body is 422; while the first is in flight, 409.
//   PATCH /orders/{id}   {"shipping_address"?, "note"?}: one event per changed field, all in
//                        one transaction (OrderShippingAddressChanged, OrderNoteChanged).
//   GET   /orders/{id}   the order.

#include <httplib.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "../common/pg.hpp"
#include "orders.hpp"

namespace orders {
namespace {

using example::exec;
using example::value;
using nlohmann::json;

struct Answer {
  int status;
  json body;
  bool replayed = false;
};

class BadRequest : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One connection per HTTP worker thread, opened again after it broke.
PGconn* connection(const std::string& url) {
  thread_local example::Connection conn(nullptr, &PQfinish);
  return example::ready(conn, url);
}

// Text a client sends that goes into a row and an event: no control characters (jsonb cannot
// hold NUL, and libpq would cut a parameter at one).
bool printable(const std::string& text) {
  for (const unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// An order id as this service makes them (gen_random_uuid): anything else is no order of ours,
// answered without echoing it.
bool is_order_id(const std::string& id) {
  if (id.size() != 36) return false;
  for (std::size_t i = 0; i < id.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? id[i] != '-' : !std::isxdigit(static_cast<unsigned char>(id[i]))) return false;
  }
  return true;
}

// The Idempotency-Key every POST must carry (cpp-httplib drops a header sent empty, so "sent
// empty" and "not sent" are one case): 1 to 255 printable ASCII characters, new for each order
// the client means to place and the same on every retry of it.
void check_key(const std::string& key) {
  if (key.empty()) {
    throw BadRequest(
        "send an Idempotency-Key header: a new value (a UUID) for each order, the "
        "same on every retry of it");
  }
  bool ok = key.size() <= 255;
  for (const unsigned char c : key) ok = ok && c >= 0x20 && c < 0x7f;
  if (!ok) throw BadRequest("Idempotency-Key must be 1 to 255 printable ASCII characters");
}

json parse_object(const std::string& body) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) throw BadRequest("the body must be one JSON object");
  return doc;
}

std::string text_field(const json& doc, const char* name, std::size_t max_length) {
  const auto it = doc.find(name);
  if (it == doc.end() || !it->is_string() || it->get<std::string>().empty() ||
      it->get<std::string>().size() > max_length || !printable(it->get<std::string>())) {
    throw BadRequest(std::string("\"") + name + "\" must be a string of 1 to " +
                     std::to_string(max_length) + " bytes without control characters");
  }
  return it->get<std::string>();
}

void refuse_unknown_fields(const json& doc, std::initializer_list<const char*> known) {
  for (const auto& [name, field] : doc.items()) {
    bool found = false;
    for (const char* k : known) found = found || name == k;
    if (!found) throw BadRequest("unknown field \"" + name + "\"");
  }
}

// The order a POST asks for, checked; its canonical text (keys sorted) is what the idempotency
// record compares, so the same order sent with other spacing or key order is the same request.
json parse_order(const std::string& body) {
  const json doc = parse_object(body);
  refuse_unknown_fields(doc, {"customer_id", "amount_cents", "card"});
  const auto amount = doc.find("amount_cents");
  if (amount == doc.end() || !amount->is_number_integer() || amount->get<long long>() < 1 ||
      amount->get<long long>() > 100'000'000) {
    throw BadRequest("\"amount_cents\" must be an integer from 1 to 100000000");
  }
  return json{{"customer_id", text_field(doc, "customer_id", 200)},
              {"amount_cents", amount->get<long long>()},
              {"card", text_field(doc, "card", 100)}};
}

// The idempotency check, inside the order's transaction. A transaction-scoped advisory lock on
// the key makes a second request with the key wait for nothing: it is told 409 at once.
std::optional<Answer> earlier_answer(PGconn* conn, const std::string& key,
                                     const std::string& request) {
  if (value(exec(conn, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
                 {"order-service.idempotency:" + key}),
            0, 0) != "t") {
    return Answer{409,
                  {{"error",
                    "a request with this Idempotency-Key is in flight; retry it "
                    "once that one has answered"}}};
  }
  const auto earlier = exec(
      conn, "SELECT request, status_code, response FROM idempotency_keys WHERE key = $1", {key});
  if (example::rows(earlier) == 0) return std::nullopt;
  if (value(earlier, 0, 0) != request) {
    return Answer{422,
                  {{"error",
                    "this Idempotency-Key was used for another request; use a new "
                    "key for a new order"}}};
  }
  return Answer{std::stoi(value(earlier, 0, 1)), json::parse(value(earlier, 0, 2)), true};
}

Answer place_order(PGconn* conn, const outbox::Producer& producer, const std::string& body,
                   const std::string& key) {
  const json order = parse_order(body);
  const std::string request = order.dump();
  example::Transaction tx(conn);
  if (auto answer = earlier_answer(conn, key, request)) return *answer;  // rolled back
  const std::string order_id =
      value(exec(conn,
                 "INSERT INTO orders (customer_id, amount_cents, card) VALUES ($1, $2, $3) "
                 "RETURNING order_id",
                 {order["customer_id"].get<std::string>(),
                  std::to_string(order["amount_cents"].get<long long>()),
                  order["card"].get<std::string>()}),
            0, 0);
  json placed = order;
  placed["order_id"] = order_id;
  const outbox::EnqueuedEvent event =
      producer.enqueue(conn, outbox::NewEvent{.aggregate_type = "order",
                                              .aggregate_id = order_id,
                                              .event_type = "OrderPlaced",
                                              .payload = placed.dump()});
  const json answer = {
      {"order_id", order_id}, {"status", "pending"}, {"event_id", event.event_id.to_string()}};
  {
    exec(conn,
         "INSERT INTO idempotency_keys (key, request, status_code, response) "
         "VALUES ($1, $2, 201, $3)",
         {key, request, answer.dump()});
  }
  example::crash_point("order.before_commit");
  tx.commit();
  example::crash_point("order.after_commit");
  return {201, answer};
}

// One changed field: the column and the event that says so.
struct Change {
  const char* field;
  const char* event_type;
};
constexpr Change kChanges[] = {{"shipping_address", "OrderShippingAddressChanged"},
                               {"note", "OrderNoteChanged"}};

Answer change_order(PGconn* conn, const outbox::Producer& producer, const std::string& order_id,
                    const std::string& body) {
  const json doc = parse_object(body);
  refuse_unknown_fields(doc, {"shipping_address", "note"});
  if (doc.empty()) throw BadRequest("nothing to change: send \"shipping_address\" or \"note\"");
  for (const Change& c : kChanges) {
    if (doc.contains(c.field)) text_field(doc, c.field, 500);
  }
  if (!is_order_id(order_id)) return {404, {{"error", "no such order"}}};
  example::Transaction tx(conn);
  const auto current =
      exec(conn, "SELECT status, shipping_address, note FROM orders WHERE order_id = $1 FOR UPDATE",
           {order_id});
  if (example::rows(current) == 0) return {404, {{"error", "no order " + order_id}}};
  if (value(current, 0, 0) == "cancelled") {
    return {409, {{"error", "order " + order_id + " is cancelled; it cannot change any more"}}};
  }
  json events = json::array();
  for (int column = 1; const Change& c : kChanges) {
    const bool unchanged =
        !doc.contains(c.field) || (!PQgetisnull(current.get(), 0, column) &&
                                   value(current, 0, column) == doc[c.field].get<std::string>());
    ++column;
    if (unchanged) continue;
    exec(conn,
         std::string("UPDATE orders SET ") + c.field +
             " = $2, updated_at = now() WHERE order_id = $1",
         {order_id, doc[c.field].get<std::string>()});
    const auto event = producer.enqueue(
        conn,
        outbox::NewEvent{.aggregate_type = "order",
                         .aggregate_id = order_id,
                         .event_type = c.event_type,
                         .payload = json{{"order_id", order_id}, {c.field, doc[c.field]}}.dump()});
    events.push_back({{"event_type", c.event_type},
                      {"event_id", event.event_id.to_string()},
                      {"sequence", event.aggregate_sequence}});
    example::crash_point("order.between_changes");  // after one change: none of them may remain
  }
  tx.commit();
  return {200, {{"order_id", order_id}, {"events", events}}};
}

Answer get_order(PGconn* conn, const std::string& order_id) {
  if (!is_order_id(order_id)) return {404, {{"error", "no such order"}}};
  const auto order = exec(conn,
                          "SELECT row_to_json(o)::text FROM (SELECT order_id, customer_id, "
                          "amount_cents, status, reason, shipping_address, note FROM orders "
                          "WHERE order_id = $1) o",
                          {order_id});
  if (example::rows(order) == 0) return {404, {{"error", "no order " + order_id}}};
  return {200, json::parse(value(order, 0, 0))};
}

// Runs one handler and turns what it threw into an answer that says what to do.
template <typename Handler>
void answer(httplib::Response& res, Handler&& handler) {
  Answer a{500, {}};
  try {
    a = handler();
  } catch (const BadRequest& e) {
    a = {400, {{"error", e.what()}}};
  } catch (const outbox::InvalidArgument& e) {  // what the producer refuses in an event
    a = {400, {{"error", e.what()}}};
  } catch (const outbox::OutcomeUnknown& e) {
    a = {503,
         {{"error", std::string("the outcome is unknown (") + e.what() +
                        "); retry with the same Idempotency-Key"}}};
  } catch (const outbox::Error& e) {
    a = {e.retryable() ? 503 : 500, {{"error", e.what()}}};
  } catch (const example::DatabaseFailure& e) {
    a = {e.retryable() ? 503 : 500, {{"error", e.what()}}};
  } catch (const std::exception& e) {
    a = {500, {{"error", std::string("internal error: ") + e.what()}}};
  }
  res.status = a.status;
  if (a.replayed) res.set_header("Idempotent-Replayed", "true");
  res.set_content(a.body.dump() + "\n", "application/json");
}

}  // namespace

void add_routes(httplib::Server& server, const std::string& database_url,
                const outbox::Producer& producer) {
  server.Post("/orders", [&, database_url](const httplib::Request& req, httplib::Response& res) {
    const std::string key = req.get_header_value("Idempotency-Key");
    answer(res, [&] {
      check_key(key);  // required: without it a retried POST would place a second order
      return place_order(connection(database_url), producer, req.body, key);
    });
  });
  server.Patch(
      R"(/orders/([^/]+))", [&, database_url](const httplib::Request& req, httplib::Response& res) {
        answer(res, [&] {
          return change_order(connection(database_url), producer, req.matches[1], req.body);
        });
      });
  server.Get(R"(/orders/([^/]+))",
             [database_url](const httplib::Request& req, httplib::Response& res) {
               answer(res, [&] { return get_order(connection(database_url), req.matches[1]); });
             });
}

void create_tables(PGconn* conn) {
  exec(conn, "SET client_min_messages = warning");
  exec(conn,
       "CREATE TABLE IF NOT EXISTS orders ("
       " order_id text PRIMARY KEY DEFAULT gen_random_uuid()::text,"
       " customer_id text NOT NULL, amount_cents bigint NOT NULL, card text NOT NULL,"
       " status text NOT NULL DEFAULT 'pending'"
       "   CHECK (status IN ('pending', 'confirmed', 'cancelled')),"
       " reason text, shipping_address text, note text,"
       " created_at timestamptz NOT NULL DEFAULT now(),"
       " updated_at timestamptz NOT NULL DEFAULT now())");
  // What a retried POST is answered with. A real service deletes keys after a day or so.
  exec(conn,
       "CREATE TABLE IF NOT EXISTS idempotency_keys ("
       " key text PRIMARY KEY, request text NOT NULL, status_code int NOT NULL,"
       " response text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())");
}

}  // namespace orders
