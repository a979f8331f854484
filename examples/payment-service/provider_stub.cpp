// payment-provider-stub: a payment provider for the saga example and its test. It keeps every
// charge in memory and says what it did, and it misbehaves on demand as real providers do.
//
//   POST /v1/charges {"amount_cents","card","reference"}, header Idempotency-Key
//        200 {"id","status":"succeeded","reference","amount_cents"}; card "tok_declined": 402
//        {"error":"card_declined"} (also recorded). With idempotency (the default) the same key
//        answers what it answered the first time and charges nothing more; another body with
//        that key is 422.
//   GET  /v1/charges?reference=R   the charge made for R (200), or 404: for reconciliation
//   GET  /v1/charges               every charge made, in order (the test's ledger)
//
// Usage: payment-provider-stub [--port P] [--no-idempotency] [--slow-every N] [--fail-every N]
//   --slow-every N    every Nth charge is made, then answered only after 2.5 s (the client
//                     times out: the outcome it sees is unknown, yet the card was charged)
//   --fail-every N    every Nth charge request gets 503 and charges nothing
// The first line on stdout is "payment-provider-stub listening on http://127.0.0.1:PORT".

#include <httplib.h>

#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;

struct Flags {
  int port = 0;
  bool idempotent = true;
  int slow_every = 0;
  int fail_every = 0;
};

class Ledger {
 public:
  explicit Ledger(const Flags& flags) : flags_(flags) {}

  // Returns the answer and whether to delay it.
  std::pair<std::pair<int, json>, bool> charge(const std::string& key, const json& request) {
    std::lock_guard lock(mutex_);
    const int n = ++requests_;
    if (flags_.idempotent && !key.empty()) {
      if (auto it = by_key_.find(key); it != by_key_.end()) {
        if (it->second.first != request) {
          return {{422, {{"error", "Idempotency-Key reused with another request"}}}, false};
        }
        return {it->second.second, false};
      }
    }
    if (flags_.fail_every > 0 && n % flags_.fail_every == 0) {
      return {{503, {{"error", "try again later"}}}, false};
    }
    const bool declined = request.value("card", "") == "tok_declined";
    json charge = {{"id", "ch_" + std::to_string(charges_.size() + 1)},
                   {"status", declined ? "declined" : "succeeded"},
                   {"reference", request.value("reference", "")},
                   {"amount_cents", request.value("amount_cents", 0)}};
    charges_.push_back(charge);
    std::pair<int, json> answer =
        declined ? std::pair<int, json>{402, {{"error", "card_declined"}, {"id", charge["id"]}}}
                 : std::pair<int, json>{200, charge};
    if (flags_.idempotent && !key.empty()) by_key_[key] = {request, answer};
    return {answer, flags_.slow_every > 0 && n % flags_.slow_every == 0};
  }

  std::pair<int, json> find(const std::string& reference) {
    std::lock_guard lock(mutex_);
    for (const json& c : charges_) {
      if (c["reference"] == reference) return {200, c};
    }
    return {404, {{"error", "no charge with reference " + reference}}};
  }

  json all() {
    std::lock_guard lock(mutex_);
    return {{"charges", charges_}, {"requests", requests_}};
  }

 private:
  const Flags flags_;
  std::mutex mutex_;
  int requests_ = 0;
  std::vector<json> charges_;
  std::map<std::string, std::pair<json, std::pair<int, json>>> by_key_;
};

Flags parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--no-idempotency") {
      flags.idempotent = false;
    } else if (arg == "--port" && has_value) {
      flags.port = std::stoi(argv[++i]);
    } else if (arg == "--slow-every" && has_value) {
      flags.slow_every = std::stoi(argv[++i]);
    } else if (arg == "--fail-every" && has_value) {
      flags.fail_every = std::stoi(argv[++i]);
    } else {
      throw std::invalid_argument("unknown argument " + arg +
                                  "; usage: payment-provider-stub [--port P] [--no-idempotency] "
                                  "[--slow-every N] [--fail-every N]");
    }
  }
  return flags;
}

void reply(httplib::Response& res, const std::pair<int, json>& answer) {
  res.status = answer.first;
  res.set_content(answer.second.dump() + "\n", "application/json");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Flags flags = parse(argc, argv);
    Ledger ledger(flags);
    httplib::Server server;
    server.set_payload_max_length(64 * 1024);
    server.Post("/v1/charges", [&](const httplib::Request& req, httplib::Response& res) {
      const json request = json::parse(req.body, nullptr, false);
      if (!request.is_object()) return reply(res, {400, {{"error", "the body must be JSON"}}});
      const auto [answer, slow] = ledger.charge(req.get_header_value("Idempotency-Key"), request);
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      reply(res, answer);
    });
    server.Get("/v1/charges", [&](const httplib::Request& req, httplib::Response& res) {
      if (req.has_param("reference"))
        return reply(res, ledger.find(req.get_param_value("reference")));
      reply(res, {200, ledger.all()});
    });
    const int port = flags.port == 0
                         ? server.bind_to_any_port("127.0.0.1")
                         : (server.bind_to_port("127.0.0.1", flags.port) ? flags.port : -1);
    if (port < 0) throw std::runtime_error("cannot listen on port " + std::to_string(flags.port));
    std::cout << "payment-provider-stub listening on http://127.0.0.1:" << port << std::endl;
    server.listen_after_bind();
  } catch (const std::exception& e) {
    std::cerr << "payment-provider-stub: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
