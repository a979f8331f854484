#include "http/http_parts.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "common/ascii_case.hpp"
#include "outbox/error.hpp"
#include "outbox/text.hpp"
#include "sinks/cloudevents.hpp"

namespace outbox::http {
namespace {

constexpr std::string_view kPlaceholders[] = {"aggregate_type", "aggregate_id", "event_type",
                                              "event_id"};
constexpr std::size_t kReasonBodyBytes = 200;  // of a refusing response's body, in the reason

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string base64(const unsigned char* data, std::size_t size) {
  std::string out(4 * ((size + 2) / 3) + 1, '\0');
  const int written =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(size));
  out.resize(static_cast<std::size_t>(written));
  return out;
}

// The value of a placeholder in the event.
std::string_view placeholder_value(std::string_view name, const Event& event, std::string& id) {
  if (name == "aggregate_type") return event.aggregate_type;
  if (name == "aggregate_id") return event.aggregate_id;
  if (name == "event_type") return event.event_type;
  id = event.event_id.to_string();
  return id;
}

bool is_tchar(unsigned char c) {
  return std::isalnum(c) != 0 ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// A header value that may go out as it is: visible ASCII, spaces and tabs, nothing else.
bool is_plain_header_value(std::string_view value) {
  return std::all_of(value.begin(), value.end(),
                     [](unsigned char c) { return c == '\t' || (c >= 0x20 && c <= 0x7e); });
}

// The length of the well-formed UTF-8 sequence at `pos` (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), 0 when the byte there starts none.
std::size_t utf8_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (pos + length > text.size() || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

// The first bytes of an answer's body as one line of well-formed UTF-8, fit for a row's
// last_error (PostgreSQL refuses text that is not UTF-8, and NUL): C0 controls and DEL as spaces,
// a byte that starts no UTF-8 sequence as '?'. Escaped again wherever it is printed.
std::string one_line(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size() && pos < max_bytes) {
    const std::size_t length = utf8_length(text, pos);
    if (length == 0) {
      out.push_back('?');
      ++pos;
    } else if (length == 1) {
      const auto c = static_cast<unsigned char>(text[pos]);
      out.push_back(c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c));
      ++pos;
    } else if (pos + length > max_bytes) {
      break;
    } else {
      out.append(text.substr(pos, length));
      pos += length;
    }
  }
  if (pos < text.size()) out += "...";
  return out;
}

}  // namespace

std::string percent_encode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_unreserved(c)) {
      out.push_back(ch);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

UrlTemplate::UrlTemplate(std::string text) : text_(std::move(text)) {
  // The query may hold a token, the authority a user:password@: the message shows neither.
  const auto refuse = [&](const std::string& why) {
    std::string shown = text_.substr(0, text_.find('?'));
    if (shown.size() < text_.size()) shown += "?...";
    const std::size_t scheme = shown.find("://");
    const std::size_t at = shown.find('@');
    if (scheme != std::string::npos && at != std::string::npos &&
        at < shown.find('/', scheme + 3)) {
      shown.replace(scheme + 3, at - scheme - 3, kRedacted);
    }
    throw ConfigError("HTTP URL template \"" + printable(shown, 200) + "\": " + why);
  };
  std::size_t scheme_end = 0;
  if (text_.starts_with("https://")) {
    scheme_end = 8;
  } else if (text_.starts_with("http://")) {
    scheme_end = 7;
  } else {
    refuse("must start with https:// or http://");
  }
  const std::size_t host_end = std::min(text_.find_first_of("/?#", scheme_end), text_.size());
  origin_ = text_.substr(0, host_end);
  if (host_end == scheme_end) refuse("names no host");
  if (origin_.find_first_of("{}@") != std::string::npos) {
    refuse(
        "the host part may hold no placeholder and no user:password@ (give credentials as a "
        "header)");
  }
  if (text_.find('#') != std::string::npos) refuse("a fragment (#...) is never sent");
  for (const char c : text_) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      refuse("holds a space, a control character or a non-ASCII byte: percent-encode it");
    }
  }
  for (std::size_t pos = text_.find('{'); pos != std::string::npos;
       pos = text_.find('{', pos + 1)) {
    const std::size_t close = text_.find('}', pos);
    const std::string_view name = close == std::string::npos
                                      ? std::string_view()
                                      : std::string_view(text_).substr(pos + 1, close - pos - 1);
    if (std::find(std::begin(kPlaceholders), std::end(kPlaceholders), name) ==
        std::end(kPlaceholders)) {
      refuse("unknown placeholder at byte " + std::to_string(pos) +
             ": the placeholders are {aggregate_type}, {aggregate_id}, {event_type}, {event_id}");
    }
  }
  if (text_.find('}') != std::string::npos &&
      std::count(text_.begin(), text_.end(), '}') != std::count(text_.begin(), text_.end(), '{')) {
    refuse("a \"}\" without its \"{\"");
  }
}

namespace {

// A value that is a whole dot segment ("." or ".."), which a URL's path resolution would remove
// along with the segment before it, goes out as %2E: an id cannot move the request to another path.
std::string encode_value(std::string_view value) {
  if (value == "." || value == "..") return value.size() == 1 ? "%2E" : "%2E%2E";
  return percent_encode(value);
}

}  // namespace

std::string UrlTemplate::render(const Event& event) const {
  std::string out;
  out.reserve(text_.size() + 64);
  std::string id;
  std::size_t pos = 0;
  while (pos < text_.size()) {
    const std::size_t open = text_.find('{', pos);
    if (open == std::string::npos) break;
    const std::size_t close = text_.find('}', open);
    out.append(text_, pos, open - pos);
    out += encode_value(
        placeholder_value(std::string_view(text_).substr(open + 1, close - open - 1), event, id));
    pos = close + 1;
  }
  out.append(text_, pos, std::string::npos);
  return out;
}

std::optional<std::string> decode_webhook_secret(std::string_view secret, std::string* why) {
  const auto fail = [&](const std::string& reason) -> std::optional<std::string> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  constexpr std::string_view kPrefix = "whsec_";
  if (!secret.starts_with(kPrefix)) {
    return fail("a signing secret starts with \"whsec_\" followed by base64 (Standard Webhooks)");
  }
  secret.remove_prefix(kPrefix.size());
  if (secret.empty() || secret.size() % 4 != 0 ||
      !std::all_of(secret.begin(), secret.end(), [](unsigned char c) {
        return std::isalnum(c) != 0 || c == '+' || c == '/' || c == '=';
      })) {
    return fail("the part after \"whsec_\" is not base64");
  }
  std::string key(secret.size() / 4 * 3, '\0');
  const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(key.data()),
                                      reinterpret_cast<const unsigned char*>(secret.data()),
                                      static_cast<int>(secret.size()));
  if (written < 0) return fail("the part after \"whsec_\" is not base64");
  std::size_t size = static_cast<std::size_t>(written);
  for (auto it = secret.rbegin(); it != secret.rend() && *it == '='; ++it) --size;
  key.resize(size);
  if (key.size() < 24 || key.size() > 64) {
    return fail("a signing secret's key is 24 to 64 bytes (Standard Webhooks); this one has " +
                std::to_string(key.size()));
  }
  return key;
}

std::string webhook_signature(std::string_view key, std::string_view id, std::int64_t timestamp,
                              std::string_view body) {
  std::string content;
  content.reserve(id.size() + body.size() + 24);
  content.append(id).append(".").append(std::to_string(timestamp)).append(".").append(body);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(content.data()), content.size(), digest.data(),
       &size);
  return "v1," + base64(digest.data(), size);
}

std::string cloudevents_header_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%') {
      out += fmt::format("%{:02X}", c);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> event_headers(const Event& event,
                                                               const std::vector<std::string>& keys,
                                                               std::int64_t timestamp,
                                                               const std::string& ce_source) {
  const std::string id = event.event_id.to_string();
  std::vector<std::pair<std::string, std::string>> out{{"Content-Type", "application/json"},
                                                       {"Idempotency-Key", id}};
  if (!keys.empty()) {
    std::string signatures;
    for (const std::string& key : keys) {
      if (!signatures.empty()) signatures += ' ';
      signatures += webhook_signature(key, id, timestamp, event.payload);
    }
    out.emplace_back("webhook-id", id);
    out.emplace_back("webhook-timestamp", std::to_string(timestamp));
    out.emplace_back("webhook-signature", std::move(signatures));
  }
  if (!ce_source.empty()) {
    for (const auto& [name, value] : detail::cloudevents_attributes(event, ce_source)) {
      out.emplace_back("ce-" + name, cloudevents_header_value(value));
    }
  }
  // The trace context the producer stored; any other header of the event stays home.
  const nlohmann::json headers = nlohmann::json::parse(event.headers, nullptr, false);
  if (headers.is_object()) {
    for (const char* name : {"traceparent", "tracestate"}) {
      const auto it = headers.find(name);
      if (it != headers.end() && it->is_string()) {
        const auto& value = it->get_ref<const std::string&>();
        if (!value.empty() && value.size() <= 512 && is_plain_header_value(value)) {
          out.emplace_back(name, value);
        }
      }
    }
  }
  return out;
}

std::optional<std::string> refuse_extra_header(std::string_view name, std::string_view value) {
  if (name.empty() ||
      !std::all_of(name.begin(), name.end(), [](unsigned char c) { return is_tchar(c); })) {
    return "a header name is letters, digits and !#$%&'*+-.^_`|~ only";
  }
  const std::string key = detail::ascii_lower(name);
  static constexpr std::string_view kOurs[] = {"content-type",
                                               "content-length",
                                               "transfer-encoding",
                                               "host",
                                               "connection",
                                               "expect",
                                               "te",
                                               "upgrade",
                                               "trailer",
                                               "idempotency-key",
                                               "traceparent",
                                               "tracestate",
                                               "keep-alive",
                                               "proxy-connection"};
  if (std::find(std::begin(kOurs), std::end(kOurs), key) != std::end(kOurs) ||
      key.starts_with("webhook-") || key.starts_with("ce-")) {
    return "outbox sets " + key + " itself";
  }
  if (!is_plain_header_value(value)) {
    return "a header value is printable ASCII on one line";
  }
  return std::nullopt;
}

DeliveryReport classify(const Response& response, bool reconcile,
                        std::chrono::milliseconds max_retry_after) {
  DeliveryReport report;
  const auto body = [&] {
    return response.body.empty() ? std::string() : ": " + one_line(response.body, kReasonBodyBytes);
  };
  // A 1xx is not an answer (curl reports 100, 102 or 103 when nothing final followed).
  if (response.status >= 200) {
    const long status = response.status;
    // Answers that say the request was not acted on. Other 5xx (500, 502, 504, ...) may come
    // after the origin acted: retried where a repeat is harmless, in doubt where it is not.
    const bool not_acted_on =
        status == 408 || status == 409 || status == 425 || status == 429 || status == 503;
    if (status >= 200 && status <= 299) {
      report.outcome = DeliveryOutcome::published;
    } else if (status >= 300 && status <= 399) {
      report.outcome = DeliveryOutcome::permanent_failure;
      report.error = fmt::format(
          "HTTP {} redirect{} not followed: point the URL template at the final address", status,
          response.location.empty() ? "" : " to " + one_line(response.location, 300));
    } else if (reconcile && status >= 500 && !not_acted_on) {
      report.outcome = DeliveryOutcome::in_doubt;
      report.error = fmt::format("HTTP {} (the origin may have acted){}", status, body());
    } else if (not_acted_on || status >= 500) {
      report.outcome = DeliveryOutcome::retryable_failure;
      report.error = fmt::format("HTTP {}{}", status, body());
      // Clamped in seconds first: a hostile "Retry-After: 9999999999999999" must not overflow.
      const std::int64_t cap_seconds =
          std::chrono::duration_cast<std::chrono::seconds>(max_retry_after).count() + 1;
      const std::chrono::seconds asked(
          std::clamp<std::int64_t>(response.retry_after_seconds, 0, cap_seconds));
      report.retry_after = std::min<std::chrono::milliseconds>(asked, max_retry_after);
    } else if (status >= 400) {
      report.outcome = DeliveryOutcome::permanent_failure;
      report.error = fmt::format("HTTP {}{}", status, body());
    } else {
      report.outcome = DeliveryOutcome::retryable_failure;
      report.error = fmt::format("HTTP {}: not a final status", status);
    }
    return report;
  }
  if (!response.request_written) {
    report.outcome = DeliveryOutcome::retryable_failure;
    report.error = "not sent: " + one_line(response.curl_error, 300);
  } else {
    report.outcome = reconcile ? DeliveryOutcome::in_doubt : DeliveryOutcome::unknown;
    report.error = "no status after the request was sent: " + one_line(response.curl_error, 300);
  }
  return report;
}

}  // namespace outbox::http
