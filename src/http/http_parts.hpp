#pragma once
// The parts of an HTTP delivery that need no network: the URL an event goes to, the signature and
// the CloudEvents attributes it carries, and what a response means. Tested on their own
// (tests/unit/http_parts_test.cpp) and fuzzed (tests/fuzz/fuzz_http_parts.cpp).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox::http {

// RFC 3986 percent-encoding of everything but the unreserved characters (A-Z a-z 0-9 - . _ ~):
// a "/", "?" or "#" in an id cannot leave its path segment.
std::string percent_encode(std::string_view text);

// A URL template, checked once: scheme http or https, a host, placeholders only after the host.
class UrlTemplate {
 public:
  // Throws ConfigError naming what is wrong.
  explicit UrlTemplate(std::string text);
  [[nodiscard]] std::string render(const Event& event) const;
  [[nodiscard]] const std::string& text() const { return text_; }
  // "https://api.example.com" (for logs and describe()).
  [[nodiscard]] const std::string& origin() const { return origin_; }

 private:
  std::string text_;
  std::string origin_;
};

// A Standard Webhooks secret ("whsec_" + base64 of the key) as its key bytes; nullopt and `why`
// for anything else.
std::optional<std::string> decode_webhook_secret(std::string_view secret, std::string* why);

// "v1,<base64 of HMAC-SHA256(key, id + "." + timestamp + "." + body)>".
std::string webhook_signature(std::string_view key, std::string_view id, std::int64_t timestamp,
                              std::string_view body);

// A CloudEvents HTTP binding header value: space, '"', '%' and every byte outside printable
// ASCII percent-encoded (UTF-8 bytes each as %XX).
std::string cloudevents_header_value(std::string_view value);

// The request headers outbox sets for `event` (not the caller's extra ones). `keys`: decoded
// signing secrets; `timestamp`: the webhook-timestamp, seconds since the epoch.
std::vector<std::pair<std::string, std::string>> event_headers(const Event& event,
                                                               const std::vector<std::string>& keys,
                                                               std::int64_t timestamp,
                                                               const std::string& ce_source);

// Whether a caller may set request header `name` (not one outbox sets, not one that frames the
// request); the reason when not.
std::optional<std::string> refuse_extra_header(std::string_view name, std::string_view value);

// One finished transfer, as the sink saw it.
struct Response {
  int curl_code = 0;                     // CURLcode; 0: a response arrived
  std::string curl_error;                // curl's words for it
  bool request_written = true;           // any byte of the request left (CURLINFO_REQUEST_SIZE > 0)
  long status = 0;                       // 0: no status line
  std::int64_t retry_after_seconds = 0;  // CURLINFO_RETRY_AFTER
  std::string location;                  // a redirect's Location
  std::string body;                      // the first bytes of the body
};

// What a finished transfer means (the table in outbox/http_sink.hpp). `reconcile`: an unknown
// outcome is in_doubt instead of unknown.
DeliveryReport classify(const Response& response, bool reconcile,
                        std::chrono::milliseconds max_retry_after);

}  // namespace outbox::http
