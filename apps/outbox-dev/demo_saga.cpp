// `outbox-dev demo --scenario saga`: the saga example (examples/order-service and
// examples/payment-service, docs/PATTERNS.md) end to end. Each service gets a database of its own
// on the PostgreSQL cluster and an `outbox relay` of its own; the Kafka cluster carries
// outbox.order and outbox.payment between them; payment-provider-stub plays the provider, slow on
// every fifth charge so some outcomes stay unknown and are retried with the same key. Orders are
// placed over HTTP with an Idempotency-Key (some sent twice, as a client that lost the answer
// would), every fifth with a card the provider declines; then the invariant report:
// every order in exactly one final state, successful charges equal to confirmed orders, no
// double charge, no duplicate effect.

#include "demo_saga.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_processes.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "servers.hpp"

namespace outbox::cli {
namespace {

using Clock = std::chrono::steady_clock;
using bench::Child;
using nlohmann::json;

// `url` with its database replaced by `database` (any libpq form: key=value or URI).
std::string with_database(const std::string& url, const std::string& database) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    const std::string message = error != nullptr ? error : "out of memory";
    PQfreemem(error);
    throw InvalidArgument("demo: cannot read the connection string: " + message);
  }
  std::string out;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || std::string_view(o->keyword) == "dbname") continue;
    std::string value = o->val;
    for (std::size_t i = 0; (i = value.find_first_of("'\\", i)) != std::string::npos; i += 2) {
      value.insert(i, "\\");
    }
    out += fmt::format("{}='{}' ", o->keyword, value);
  }
  PQconninfoFree(options);
  return out + "dbname=" + database;
}

// The directory of this program: the examples' programs are built under it.
std::filesystem::path build_dir() {
  return std::filesystem::canonical("/proc/self/exe").parent_path();
}

std::filesystem::path program(const std::string& relative) {
  const auto path = build_dir() / relative;
  if (!std::filesystem::exists(path)) {
    throw ConfigError("demo: " + path.string() +
                      " is missing; build the examples (cmake -DOUTBOX_BUILD_EXAMPLES=ON, the "
                      "default) with `make build`");
  }
  return path;
}

// Waits until `child`'s log matches `pattern` and returns the first group of the match.
std::string wait_for(const Child& child, const std::string& name, const std::string& pattern) {
  const std::regex line(pattern);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    std::ifstream log(child.log_path());
    const std::string text((std::istreambuf_iterator<char>(log)), {});
    std::smatch match;
    if (std::regex_search(text, match, line)) return match[1];
    if (!child.running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw Error(name + " did not start; its log: " + child.log_path(), false);
}

// Waits for "listening on http://127.0.0.1:PORT" in `child`'s log and returns the port.
int listening_port(const Child& child, const std::string& name) {
  return std::stoi(wait_for(child, name, "listening on http://127\\.0\\.0\\.1:([0-9]+)"));
}

struct Placed {
  int orders = 0;
  int declined = 0;
  int retried = 0;       // requests sent a second time with the same key and body
  int retried_same = 0;  // of those, answered with the same order
  std::set<std::string> ids;
};

// POST /orders until it answers 201 (30 s); returns the order id.
std::string post_order(httplib::Client& client, const std::string& key, const json& order) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    const auto res =
        client.Post("/orders", {{"Idempotency-Key", key}}, order.dump(), "application/json");
    if (res && res->status == 201) return json::parse(res->body).at("order_id");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw Error("demo: POST /orders with key " + key + " got no 201 within 30 s", true);
}

Placed place_orders(int port, int count) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(10));
  Placed placed;
  for (int i = 1; i <= count; ++i) {
    const bool declined = i % 5 == 0;
    const json order = {{"customer_id", fmt::format("customer-{}", i % 7)},
                        {"amount_cents", 100 * i},
                        {"card", declined ? "tok_declined" : "tok_visa"}};
    const std::string key = fmt::format("demo-{}", i);
    const std::string id = post_order(client, key, order);
    placed.ids.insert(id);
    ++placed.orders;
    placed.declined += declined ? 1 : 0;
    if (i % 10 == 3) {  // the client lost the answer and sends the request again
      ++placed.retried;
      placed.retried_same += post_order(client, key, order) == id ? 1 : 0;
    }
  }
  return placed;
}

std::int64_t count(PGconn* conn, const std::string& sql) { return pg::exec(conn, sql).int64(0, 0); }

// Until no order is pending, or `timeout`; returns how many still are.
std::int64_t wait_settled(PGconn* orders, std::chrono::seconds timeout,
                          const std::function<void(const std::string&)>& say) {
  const auto deadline = Clock::now() + timeout;
  auto next_line = Clock::now();
  std::int64_t pending = 0;
  while ((pending = count(orders, "SELECT count(*) FROM orders WHERE status = 'pending'")) > 0 &&
         Clock::now() < deadline) {
    if (Clock::now() >= next_line) {
      say(fmt::format("  {} order(s) waiting for their payment ...", pending));
      next_line = Clock::now() + std::chrono::seconds(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return pending;
}

json report(PGconn* orders, PGconn* payments, int provider_port, const Placed& placed,
            std::int64_t pending) {
  const auto state = pg::exec(orders,
                              "SELECT count(*) FILTER (WHERE status = 'confirmed'),"
                              " count(*) FILTER (WHERE status = 'cancelled'), count(*),"
                              " count(*) FILTER (WHERE (SELECT count(*) FROM outbox.outbox_events e"
                              "  WHERE e.aggregate_id = o.order_id AND e.event_type IN"
                              "  ('OrderConfirmed', 'OrderCancelled')) <> 1)"
                              " FROM orders o");
  const auto charges =
      pg::exec(payments, "SELECT idempotency_key FROM charges WHERE status = 'succeeded'");
  std::set<std::string> succeeded_keys;
  for (int r = 0; r < charges.rows(); ++r) succeeded_keys.emplace(charges.text(r, 0));
  httplib::Client provider("127.0.0.1", provider_port);
  const auto ledger_answer = provider.Get("/v1/charges");
  if (!ledger_answer || ledger_answer->status != 200) {
    throw Error("demo: the provider stub did not answer GET /v1/charges", true);
  }
  std::map<std::string, int> at_provider;                // successful charges per reference
  const json ledger = json::parse(ledger_answer->body);  // kept: the loop reads into it
  for (const json& c : ledger.at("charges")) {
    if (c.at("status") == "succeeded") ++at_provider[c.at("reference").get<std::string>()];
  }
  int double_charges = 0;  // references charged more than once
  int unmatched = 0;
  std::int64_t successful = 0;  // every successful charge, a double one counted twice
  for (const auto& [reference, n] : at_provider) {
    successful += n;
    double_charges += n > 1 ? 1 : 0;
    unmatched += succeeded_keys.count(reference) == 0 ? 1 : 0;
  }
  const std::int64_t confirmed = state.int64(0, 0);
  json r = {{"orders", placed.orders},
            {"orders_in_database", state.int64(0, 2)},
            {"confirmed", confirmed},
            {"cancelled", state.int64(0, 1)},
            {"declined_cards", placed.declined},
            {"pending", pending},
            {"orders_without_exactly_one_final_event", state.int64(0, 3)},
            {"successful_charges", successful},
            {"double_charges", double_charges},
            {"charges_for_no_confirmed_order", unmatched},
            {"retried_requests", placed.retried},
            {"retried_requests_answered_alike", placed.retried_same}};
  r["ok"] = pending == 0 && state.int64(0, 2) == placed.orders && state.int64(0, 3) == 0 &&
            confirmed == placed.orders - placed.declined && state.int64(0, 1) == placed.declined &&
            successful == confirmed && double_charges == 0 && unmatched == 0 &&
            placed.retried_same == placed.retried;
  return r;
}

void print(const json& r) {
  std::cout << fmt::format(
      "saga: {} orders placed ({} with a declined card): {} confirmed, {} cancelled, {} pending\n"
      "  every order in exactly one final state (one OrderConfirmed or OrderCancelled): {}\n"
      "  successful charges at the provider: {} for {} confirmed orders; double charges: {}; "
      "charges for no confirmed order: {}\n"
      "  requests sent twice with one Idempotency-Key, answered with the same order: {}/{} "
      "({} orders in the database)\n"
      "  verdict: {}\n",
      r["orders"].get<int>(), r["declined_cards"].get<int>(), r["confirmed"].get<std::int64_t>(),
      r["cancelled"].get<std::int64_t>(), r["pending"].get<std::int64_t>(),
      r["orders_without_exactly_one_final_event"].get<std::int64_t>() == 0 ? "yes" : "NO",
      r["successful_charges"].get<std::int64_t>(), r["confirmed"].get<std::int64_t>(),
      r["double_charges"].get<int>(), r["charges_for_no_confirmed_order"].get<int>(),
      r["retried_requests_answered_alike"].get<int>(), r["retried_requests"].get<int>(),
      r["orders_in_database"].get<std::int64_t>(),
      r["ok"].get<bool>() ? "OK, the invariants hold" : "VIOLATED");
}

// The servers' databases, made afresh: saga_orders and saga_payments.
std::pair<std::string, std::string> make_databases(const std::string& url) {
  auto admin = pg::Connection::open(url, "outbox-demo-saga");
  pg::exec(admin.get(), "SET client_min_messages = warning");  // no "does not exist, skipping"
  for (const char* name : {"saga_orders", "saga_payments"}) {
    pg::exec(admin.get(), fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", name));
    pg::exec(admin.get(), fmt::format("CREATE DATABASE {}", name));
  }
  return {with_database(url, "saga_orders"), with_database(url, "saga_payments")};
}

}  // namespace

int run_saga_demo(const SagaDemoOptions& options) {
  if (options.json || options.quiet) spdlog::set_level(spdlog::level::warn);
  auto say = [&](const std::string& text) {
    if (!options.json && !options.quiet) std::cout << text << std::endl;
  };
  Servers servers(options.database_url, options.kafka_brokers, {}, 3, say);
  if (servers.kafka()) {
    for (const char* topic : {"outbox.order", "outbox.payment"}) {
      servers.kafka()->create_topic(topic, 3);
    }
  }
  const auto [orders_url, payments_url] = make_databases(servers.database_url());
  char logs_template[] = "/tmp/outbox-saga-demo.XXXXXX";
  const std::string logs = mkdtemp(logs_template);
  say("saga: databases saga_orders and saga_payments; kafka " + servers.brokers() + "; logs in " +
      logs);
  const std::string relay = program("outbox").string();
  std::vector<std::unique_ptr<Child>> children;
  auto start = [&](std::vector<std::string> args, const std::string& name) -> Child& {
    children.push_back(std::make_unique<Child>(args, logs + "/" + name + ".log"));
    return *children.back();
  };
  const int provider_port = listening_port(
      start({program("examples/payment-service/payment-provider-stub"), "--slow-every", "5"},
            "provider"),
      "payment-provider-stub");
  wait_for(start({program("examples/payment-service/payment-service"), payments_url,
                  servers.brokers(), fmt::format("http://127.0.0.1:{}", provider_port)},
                 "payment-service"),
           "payment-service", "(running)");  // its outbox schema made: its relay may start
  const int order_port = listening_port(
      start({program("examples/order-service/order-service"), orders_url, servers.brokers(), "0"},
            "order-service"),
      "order-service");
  start({relay, "relay", "--db", orders_url, "--kafka-brokers", servers.brokers()}, "order-relay");
  start({relay, "relay", "--db", payments_url, "--kafka-brokers", servers.brokers()},
        "payment-relay");

  say(fmt::format("saga: placing {} orders at http://127.0.0.1:{} ...", options.orders,
                  order_port));
  const Placed placed = place_orders(order_port, options.orders);
  auto orders_db = pg::Connection::open(orders_url, "outbox-demo-saga");
  auto payments_db = pg::Connection::open(payments_url, "outbox-demo-saga");
  const std::int64_t pending = wait_settled(orders_db.get(), std::chrono::seconds(120), say);
  const json r = report(orders_db.get(), payments_db.get(), provider_port, placed, pending);
  for (auto it = children.rbegin(); it != children.rend(); ++it) (*it)->stop();
  if (options.json) {
    std::cout << r.dump() << std::endl;
  } else {
    print(r);
  }
  if (!r["ok"].get<bool>()) {
    std::cerr << "saga: the processes' logs are kept in " << logs << "\n";
    return 1;
  }
  std::filesystem::remove_all(logs);
  return 0;
}

}  // namespace outbox::cli
