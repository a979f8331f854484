// The charge worker: the only place that calls the payment provider. The windows it must
// survive, each a crash point of the saga test:
//   after the claim, before the call       the lease expires; the charge is tried again
//   the call times out (outcome unknown)    tried again after the lease with the SAME key, or,
//                                           for a provider without idempotency, looked up first
//   after the provider charged, before the outcome is recorded
//                                           as a timeout: the retry or the lookup finds the
//                                           charge made, and records it; never a second charge
// The outcome and its event (PaymentSucceeded or PaymentFailed) commit together, once: the
// update only takes a charge still pending, so a late second worker records nothing.

#include <httplib.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "../common/pg.hpp"
#include "payments.hpp"

namespace payments {
namespace {

using nlohmann::json;

struct Charge {
  std::string order_id, key, card;
  long long amount_cents = 0;
  int attempts = 0;
};

struct Outcome {
  bool succeeded = false;
  std::string charge_id;  // the provider's, when it succeeded
  std::string reason;     // why not, when it failed
};

// Takes one pending charge whose time has come, for `lease`: committed at once, so a worker that
// dies holding it only delays it.
std::optional<Charge> claim(PGconn* conn, std::chrono::milliseconds lease) {
  const auto r = example::exec(conn,
                               "UPDATE charges SET attempts = attempts + 1,"
                               " next_attempt_at = now() + $1 * interval '1 millisecond'"
                               " WHERE order_id = (SELECT order_id FROM charges"
                               "  WHERE status = 'pending' AND next_attempt_at <= now()"
                               "  ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
                               " RETURNING order_id, idempotency_key, amount_cents, card, attempts",
                               {std::to_string(lease.count())});
  if (example::rows(r) == 0) return std::nullopt;
  return Charge{example::value(r, 0, 0), example::value(r, 0, 1), example::value(r, 0, 3),
                std::stoll(example::value(r, 0, 2)), std::stoi(example::value(r, 0, 4))};
}

// What a provider's answer says for sure; std::nullopt when it does not: no answer (a timeout, a
// reset), a 5xx, a 409 (a request with this key in flight), a 429 or 408, another 4xx (a setting
// to fix: 401, 403, 404), or a charge not final yet. The charge stays pending and is tried again
// after the lease; only a success or an explicit decline settles it.
std::optional<Outcome> read_answer(const httplib::Result& res) {
  if (!res) return std::nullopt;
  const json body = json::parse(res->body, nullptr, false);
  const bool object = body.is_object();
  if (res->status == 402) {  // declined: the card will not be charged
    return Outcome{false, "", object ? body.value("error", "card_declined") : "card_declined"};
  }
  if (res->status != 200 && res->status != 201) {
    if (res->status >= 400 && res->status < 500 && res->status != 408 && res->status != 409 &&
        res->status != 429) {
      std::cerr << "payment-service: the provider refused a charge with " << res->status
                << " (a setting to fix?): " << res->body.substr(0, 200) << "\n";
    }
    return std::nullopt;
  }
  const std::string status = object ? body.value("status", "") : "";
  if (status == "succeeded") return Outcome{true, body.value("id", ""), ""};
  // A charge found by reconciliation: the same reason as the 402 the charge itself answered.
  if (status == "declined") return Outcome{false, "", "card_declined"};
  return std::nullopt;  // "pending", "processing", or no status at all: not settled yet
}

class Provider {
 public:
  explicit Provider(const WorkerOptions& o) : client_(o.provider_url) {
    client_.set_connection_timeout(o.provider_timeout);
    client_.set_read_timeout(o.provider_timeout);
    client_.set_write_timeout(o.provider_timeout);
  }
  std::optional<Outcome> charge(const Charge& c) {
    const json body = {{"amount_cents", c.amount_cents}, {"card", c.card}, {"reference", c.key}};
    return read_answer(
        client_.Post("/v1/charges", {{"Idempotency-Key", c.key}}, body.dump(), "application/json"));
  }
  // Reconciliation: the charge made for this reference, if any. Empty optional: cannot tell.
  std::optional<std::optional<Outcome>> find(const Charge& c) {
    const auto res = client_.Get("/v1/charges?reference=" + c.key);
    if (res && res->status == 404) return std::optional<Outcome>();
    if (!res || res->status != 200) return std::nullopt;
    return std::optional<Outcome>(read_answer(res));
  }

 private:
  httplib::Client client_;
};

// The outcome, once: the charge's row and its event in one transaction.
void record(PGconn* conn, const outbox::Producer& producer, const Charge& c, const Outcome& o) {
  example::Transaction tx(conn);
  const auto updated =
      example::exec(conn,
                    "UPDATE charges SET status = $2, provider_charge_id = $3, failure_reason = $4,"
                    " settled_at = now() WHERE order_id = $1 AND status = 'pending'",
                    {c.order_id, o.succeeded ? "succeeded" : "failed",
                     o.succeeded ? std::optional<std::string>(o.charge_id) : std::nullopt,
                     o.succeeded ? std::nullopt : std::optional<std::string>(o.reason)});
  if (example::affected(updated) == 0) return;  // recorded already, by another worker
  json payload = {{"order_id", c.order_id}, {"amount_cents", c.amount_cents}};
  if (o.succeeded) {
    payload["charge_id"] = o.charge_id;
  } else {
    payload["reason"] = o.reason;
  }
  producer.enqueue(
      conn, outbox::NewEvent{.aggregate_type = "payment",
                             .aggregate_id = c.order_id,
                             .event_type = o.succeeded ? "PaymentSucceeded" : "PaymentFailed",
                             .payload = payload.dump()});
  tx.commit();
}

// One attempt at one claimed charge; std::nullopt when its outcome is still unknown.
std::optional<Outcome> attempt(Provider& provider, const WorkerOptions& o, const Charge& c) {
  example::crash_point("charge.after_claim");
  if (!o.provider_idempotent && c.attempts > 1) {
    // An earlier attempt may have charged: ask before sending again. Its lease has passed, so
    // a request of that attempt still on its way to the provider is the one window left.
    const auto found = provider.find(c);
    if (!found) return std::nullopt;  // cannot tell now: the lease passes, then ask again
    if (*found) {                     // it did charge (or decline): record that
      std::cerr << "payment-service: reconciled charge " << c.key << " (order " << c.order_id
                << "): the provider has it; not sent again\n";
      return *found;
    }
  }
  std::optional<Outcome> outcome = provider.charge(c);
  example::crash_point("charge.after_provider_call");
  return outcome;
}

}  // namespace

void run_worker(const WorkerOptions& options, const outbox::Producer& producer,
                const std::atomic<bool>& stop) {
  Provider provider(options);
  example::Connection conn(nullptr, &PQfinish);
  while (!stop) {
    try {
      const std::optional<Charge> charge =
          claim(example::ready(conn, options.database_url), options.lease);
      if (!charge) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (const auto outcome = attempt(provider, options, *charge)) {
        record(conn.get(), producer, *charge, *outcome);
      } else {
        std::cerr << "payment-service: the outcome of charge " << charge->key << " (order "
                  << charge->order_id << ", attempt " << charge->attempts
                  << ") is unknown; tried again after the lease\n";
      }
    } catch (const std::exception& e) {
      std::cerr << "payment-service: charge worker: " << e.what() << "; retrying\n";
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

}  // namespace payments
