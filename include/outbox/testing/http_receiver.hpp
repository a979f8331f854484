#pragma once
// A webhook endpoint for the demo and the tests (cpp-httplib on 127.0.0.1): it applies each
// request as an "effect", either deduplicating by Idempotency-Key (an endpoint that honours the
// key) or blindly (one that does not, where a repeat is a second effect), and can be told to
// answer a status, to be slow, and to go down and come back on the same port. It counts what a
// delivery guarantee is judged by: effects per key, duplicate effects, order inversions per
// aggregate (from the ce-partitionkey and ce-aggregatesequence headers). GET /status/<key>
// answers 200 when the key was applied, 404 when not: the status URL `outbox reconcile check`
// asks.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace outbox {

class HttpReceiver {
 public:
  struct Options {
    bool deduplicate = true;    // false: every 2xx answer applies the request again
    std::uint16_t port = 0;     // 0: any free port, kept across stop() and start()
    bool keep_requests = true;  // false: counts only (a benchmark's millions of requests)
  };

  struct Request {
    std::string method;
    std::string path;                            // with the query
    std::map<std::string, std::string> headers;  // names in lower case
    std::string body;
    int status = 0;                              // what it was answered
    bool applied = false;                        // it made an effect
    std::chrono::steady_clock::time_point at{};  // when it arrived
  };

  struct Counts {
    std::uint64_t requests = 0;
    std::uint64_t effects = 0;            // applications, repeats included
    std::uint64_t distinct_keys = 0;      // Idempotency-Keys applied at least once
    std::uint64_t duplicate_effects = 0;  // applications of a key already applied
    std::uint64_t suppressed = 0;       // repeats the deduplicating endpoint answered, not applied
    std::uint64_t inversions = 0;       // an aggregate's sequence below one applied before it
    std::uint64_t status_requests = 0;  // GET /status/<key> asked
  };

  HttpReceiver();  // deduplicating, any port
  explicit HttpReceiver(Options options);
  ~HttpReceiver();
  HttpReceiver(const HttpReceiver&) = delete;
  HttpReceiver& operator=(const HttpReceiver&) = delete;

  // "http://127.0.0.1:<port>".
  [[nodiscard]] std::string url() const;
  [[nodiscard]] std::uint16_t port() const;

  // Down (connections closed, new ones refused) and up again on the same port.
  void stop();
  void start();

  // The next `count` requests are answered `status` with `body` (and a Retry-After header when
  // `retry_after` is not empty), applying nothing unless the status is 2xx; then 200 again.
  void answer_next(int count, int status, std::string body = {}, std::string retry_after = {});
  // Each request waits this long after it was applied and before its answer (a client with a
  // shorter timeout sees no status, though the effect happened).
  void set_delay(std::chrono::milliseconds delay);

  [[nodiscard]] Counts counts() const;
  [[nodiscard]] std::vector<Request> requests() const;
  // Effects per Idempotency-Key.
  [[nodiscard]] std::map<std::string, std::uint64_t> effects_by_key() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
