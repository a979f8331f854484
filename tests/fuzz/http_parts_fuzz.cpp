// The HTTP sink's pure parts (src/http/http_parts.hpp) against anything an event row, an
// operator's template or an endpoint's answer can hold: a URL template is accepted or refused
// with a printable message, and an accepted one never lets an event move the host or put a
// space, a control or a non-ASCII byte into the URL; the headers an event makes are one line of
// visible ASCII each; what an answer becomes is well-formed UTF-8 with no control character
// (it goes into a row's last_error, which PostgreSQL checks); a secret is decoded or refused.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "http/http_parts.hpp"
#include "outbox/error.hpp"

namespace {

bool visible_ascii(const std::string& text, bool allow_space) {
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u > 0x7e || u < 0x20 || (u == 0x20 && !allow_space)) return false;
  }
  return true;
}

// Well-formed UTF-8 (RFC 3629, checked here on its own, not with the code under test) without
// C0 controls or DEL.
bool row_text(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x20 || b == 0x7f) return false;
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::uint32_t code = 0;
    std::size_t length = 0;
    if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
      code = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      code = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      code = b & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      code = (code << 6) | (c & 0x3F);
    }
    const std::uint32_t least = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
    if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

void check_url(const std::string& url_template, const outbox::Event& event) {
  try {
    const outbox::http::UrlTemplate url(url_template);
    const std::string rendered = url.render(event);
    if (!rendered.starts_with(url.origin())) {
      outbox::fuzz::fail("a rendered URL left its origin", url_template);
    }
    const std::string rest = rendered.substr(url.origin().size());
    if (!rest.empty() && rest[0] != '/' && rest[0] != '?') {
      outbox::fuzz::fail("an event changed the host part", rendered);
    }
    if (!visible_ascii(rendered, false)) {
      outbox::fuzz::fail("a rendered URL holds a space, a control or a non-ASCII byte", rendered);
    }
  } catch (const outbox::ConfigError& error) {
    outbox::fuzz::expect_printable_message(error.what(), url_template);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  outbox::Event event;
  event.aggregate_type = input.ConsumeRandomLengthString(100);
  event.aggregate_id = input.ConsumeRandomLengthString(100);
  event.event_type = input.ConsumeRandomLengthString(100);
  event.aggregate_sequence = input.ConsumeIntegral<std::int64_t>();
  event.schema_version = input.ConsumeIntegral<std::int32_t>();
  event.headers = input.ConsumeRandomLengthString(300);
  event.occurred_at = input.ConsumeRandomLengthString(60);
  event.payload = input.ConsumeRandomLengthString(300);
  check_url(input.ConsumeRandomLengthString(200), event);

  const std::string secret = input.ConsumeRandomLengthString(100);
  std::string why;
  const auto key = outbox::http::decode_webhook_secret(secret, &why);
  if (key && (key->size() < 24 || key->size() > 64)) outbox::fuzz::fail("a key size", secret);
  if (!key) outbox::fuzz::expect_printable_message(why, secret);
  for (const auto& [name, value] : outbox::http::event_headers(
           event, key ? std::vector<std::string>{*key} : std::vector<std::string>{}, 1700000000,
           input.ConsumeRandomLengthString(50))) {
    if (!visible_ascii(value, true) || !visible_ascii(name, false)) {
      outbox::fuzz::fail("a header that is not one line of visible ASCII", name + ": " + value);
    }
  }

  outbox::http::Response response;
  response.status = input.ConsumeIntegralInRange<long>(0, 999);
  response.curl_code = input.ConsumeIntegralInRange<int>(0, 100);
  response.request_written = input.ConsumeBool();
  response.retry_after_seconds = input.ConsumeIntegral<std::int64_t>();
  response.location = input.ConsumeRandomLengthString(400);
  response.curl_error = input.ConsumeRandomLengthString(400);
  response.body = input.ConsumeRemainingBytesAsString();
  const outbox::DeliveryReport report =
      outbox::http::classify(response, input.ConsumeBool(), std::chrono::minutes(10));
  // C1 controls and bidirectional marks may stay (printing escapes them); a byte that is not
  // UTF-8, NUL or another C0 control would break the row or a log line.
  if (!row_text(report.error)) {
    outbox::fuzz::fail("an outcome's error text that would break its row", report.error);
  }
  if (report.retry_after.count() < 0 || report.retry_after > std::chrono::minutes(10)) {
    outbox::fuzz::fail("a Retry-After outside [0, cap]", response.body);
  }
  return 0;
}
