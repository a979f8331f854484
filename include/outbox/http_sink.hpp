#pragma once
// The HTTP sink: the relay delivers each event as one HTTP request to an API or a webhook
// endpoint (libcurl). Part of the outbox::http target; outbox::outbox alone does not need it.
//
// What a response means:
//   2xx                       published
//   408, 425, 429, 5xx        retried with the relay's backoff, no sooner than a Retry-After
//                             (seconds or an HTTP date, capped at max_retry_after)
//   3xx                       a failure, never followed: permanent (quarantined, the Location in
//                             the reason), since every later event would be redirected too
//   410 and other 4xx         permanent: quarantined with the status and the first bytes of the
//                             body; its aggregate waits, others flow
//   no connection, refused,   retried: the request was never written, so nothing can have
//   TLS handshake failed      happened
//   a timeout, a reset, a     an unknown outcome: the endpoint may have acted. on_unknown says
//   connection closed before  what follows: sent again with the same Idempotency-Key and
//   the status line           webhook-id (retry), or parked in doubt for `outbox reconcile`
//
// Every request carries `Idempotency-Key: <event id>`; `webhook-id` (the event id, the same on
// every retry and after every restart), `webhook-timestamp` and `webhook-signature` (Standard
// Webhooks, https://www.standardwebhooks.com) when a signing secret is given; the CloudEvents 1.0
// HTTP binary-mode attributes (ce-id, ce-source, ce-type, ce-subject, ce-time, ce-specversion and
// the extensions partitionkey, aggregatetype, aggregatesequence, schemaversion; CloudEvents'
// own sequence extension wants values that sort as strings, which "10" after "9" would not,
// and header values percent-encoded as the HTTP binding says: a receiver decodes them, which
// the JavaScript, Go and Java SDKs leave to it); and the event's own
// `traceparent` and `tracestate` when it has them. No other header of the event goes out: a
// writer of the table must not be able to set Host, Authorization or Content-Length.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox {

// What an unknown outcome (no status after the request was written) leads to.
//   retry      for an endpoint that honours Idempotency-Key or webhook-id: sent again with the
//              same key, the endpoint applies it once.
//   reconcile  for one that does not: never sent again by a relay. The event waits in doubt, its
//              aggregate behind it, until `outbox reconcile` settles it (asking a status URL, or
//              an operator's audited decision). Each request then opens its own connection: curl
//              silently sends a request again when a reused connection turns out closed.
enum class HttpOnUnknown { retry, reconcile };

struct HttpSinkOptions {
  // The URL per event, http:// or https://. Placeholders {aggregate_type}, {aggregate_id},
  // {event_type} and {event_id} in the path or the query are replaced, percent-encoded (a "/" in
  // an id stays inside its segment); the scheme and the host are fixed.
  std::string url_template;
  std::string method = "POST";  // POST, PUT or PATCH
  // Extra request headers ("Authorization", a tenant id): name, value. Names outbox sets itself
  // are refused.
  std::vector<std::pair<std::string, std::string>> headers;
  // Standard Webhooks secrets ("whsec_" + base64). Empty: requests are not signed. Two or more:
  // each signs, and webhook-signature carries every signature (rotation: the receiver accepts
  // either while it moves to the new one).
  std::vector<std::string> signing_secrets;
  std::string cloudevents_source = "/outbox";  // ce-source (a URI-reference); empty: no ce- headers
  std::string ca_file;  // PEM bundle to verify the server with; empty: the system's
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds timeout{10000};  // the whole request, connecting included
  // The relay's lease: a request must time out before it, or another relay could deliver the
  // event and its successor first. 0: not checked.
  std::chrono::milliseconds max_timeout{0};
  std::size_t max_connections_per_host = 16;   // requests beyond wait for a connection
  std::size_t max_response_bytes = 64 * 1024;  // read at most this much of a response's body
  std::chrono::milliseconds max_retry_after{std::chrono::minutes(10)};  // Retry-After cap
  bool proxy_from_environment = false;  // honour http_proxy/https_proxy/no_proxy
  HttpOnUnknown on_unknown = HttpOnUnknown::retry;
};

// Throws ConfigError for an unusable URL template, method, header, secret or timeout, saying
// which and what to give instead.
std::unique_ptr<Sink> make_http_sink(const HttpSinkOptions& options);

// `outbox reconcile check`: what a destination without idempotency says about an event in doubt,
// asked with a GET of a status URL per event (same placeholders as the sink's URL template).
struct HttpStatusCheckOptions {
  std::string url_template;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Authorization
  std::string ca_file;
  std::chrono::milliseconds timeout{10000};
  bool proxy_from_environment = false;
};
enum class HttpStatusAnswer {
  happened,        // 200: the destination has it; the event is settled as published
  did_not_happen,  // 404: it has not; the event is sent again
  unknown,         // anything else (no answer, 5xx, a redirect): it stays in doubt
};
struct HttpStatus {
  HttpStatusAnswer answer = HttpStatusAnswer::unknown;
  std::string detail;  // "HTTP 200", "HTTP 503: ...", "no answer: ..."
};
// Throws ConfigError for an unusable template or header.
HttpStatus ask_http_status(const Event& event, const HttpStatusCheckOptions& options);

// The URL `event` goes to under `url_template` (exposed for tests and tools).
std::string render_url(const std::string& url_template, const Event& event);

}  // namespace outbox
