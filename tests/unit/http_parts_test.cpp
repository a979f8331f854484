#include "http/http_parts.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "outbox/error.hpp"
#include "outbox/http_sink.hpp"
#include "sinks/cloudevents.hpp"

namespace outbox::http {
namespace {

Event sample_event() {
  Event event;
  event.event_id = EventId::parse("0190a6d2-8f00-7c3e-9f6e-5b8f1d2a3c4e").value();
  event.aggregate_type = "order";
  event.aggregate_id = "4711/a b?c#d";
  event.aggregate_sequence = 7;
  event.event_type = "OrderPlaced";
  event.schema_version = 2;
  event.payload = R"({"total":12})";
  event.headers = R"({"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",)"
                  R"("Host":"evil.example","tracestate":"bad\r\nX-Injected: 1"})";
  event.occurred_at = "2026-12-03 06:53:12.5+01";
  return event;
}

std::string header(const std::vector<std::pair<std::string, std::string>>& headers,
                   const std::string& name) {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return "<absent>";
}

// The test vector of the Standard Webhooks specification (standard-webhooks/spec, the
// reference libraries' tests): this secret, id, timestamp and body sign to this value.
TEST(WebhookSignature, MatchesTheSpecificationsTestVector) {
  std::string why;
  const auto key = decode_webhook_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &why);
  ASSERT_TRUE(key.has_value()) << why;
  EXPECT_EQ(key->size(), 24U);
  EXPECT_EQ(webhook_signature(*key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                              R"({"test": 2432232314})"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(WebhookSignature, RefusesSecretsThatAreNotWhsecBase64) {
  std::string why;
  EXPECT_FALSE(decode_webhook_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &why));
  EXPECT_NE(why.find("whsec_"), std::string::npos);
  EXPECT_FALSE(decode_webhook_secret("whsec_not base64!", &why));
  EXPECT_NE(why.find("not base64"), std::string::npos);
  EXPECT_FALSE(decode_webhook_secret("whsec_c2hvcnQ=", &why));  // "short": 5 bytes
  EXPECT_NE(why.find("24 to 64 bytes"), std::string::npos);
}

TEST(UrlTemplate, PercentEncodesEachPlaceholderInsideItsSegment) {
  const UrlTemplate url(
      "https://api.example.com/hooks/{aggregate_type}/{aggregate_id}?e={event_id}");
  EXPECT_EQ(url.render(sample_event()),
            "https://api.example.com/hooks/order/4711%2Fa%20b%3Fc%23d"
            "?e=0190a6d2-8f00-7c3e-9f6e-5b8f1d2a3c4e");
  EXPECT_EQ(url.origin(), "https://api.example.com");
  EXPECT_EQ(render_url("http://h:8080/{event_type}", sample_event()), "http://h:8080/OrderPlaced");
  // A whole dot segment would take the request to another path: sent encoded.
  Event dots = sample_event();
  dots.aggregate_type = "..";
  dots.aggregate_id = ".";
  EXPECT_EQ(render_url("https://h/a/{aggregate_type}/{aggregate_id}/x", dots),
            "https://h/a/%2E%2E/%2E/x");
  dots.aggregate_id = "v1.2..";
  EXPECT_EQ(render_url("https://h/{aggregate_id}", dots), "https://h/v1.2..");
}

TEST(UrlTemplate, RefusesWhatWouldMoveTheHostOrNeverBeSent) {
  const auto refused = [](const std::string& text, const std::string& why) {
    try {
      (void)UrlTemplate(text);
      ADD_FAILURE() << text << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("ftp://h/x", "https:// or http://");
  refused("https:///x", "no host");
  refused("https://{aggregate_id}.example.com/x", "host part");
  refused("https://user:pw@h/x", "host part");
  refused("https://h/x#frag", "fragment");
  refused("https://h/{aggregate}", "unknown placeholder");
  refused("https://h/{aggregate_id", "unknown placeholder");
  refused("https://h/x}", "without its");
  refused("https://h/a b", "space");
  try {
    (void)UrlTemplate("https://h/x?token=s3cret&a=b c");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos)
        << "the query may be a secret";
  }
  try {
    (void)UrlTemplate("https://alice:hunter22@h/x");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter22"), std::string::npos) << e.what();
  }
}

TEST(EventHeaders, CarryTheKeyTheSignatureCloudEventsAndOnlyTheTraceContext) {
  std::string why;
  const auto key = decode_webhook_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &why).value();
  const Event event = sample_event();
  const auto headers = event_headers(event, {key, key}, 1700000000, "/orders service");
  const std::string id = "0190a6d2-8f00-7c3e-9f6e-5b8f1d2a3c4e";
  EXPECT_EQ(header(headers, "Idempotency-Key"), id);
  EXPECT_EQ(header(headers, "webhook-id"), id);
  EXPECT_EQ(header(headers, "webhook-timestamp"), "1700000000");
  const std::string one = webhook_signature(key, id, 1700000000, event.payload);
  EXPECT_EQ(header(headers, "webhook-signature"), one + " " + one);
  EXPECT_EQ(header(headers, "ce-specversion"), "1.0");
  EXPECT_EQ(header(headers, "ce-id"), id);
  EXPECT_EQ(header(headers, "ce-source"), "/orders%20service");
  EXPECT_EQ(header(headers, "ce-type"), "OrderPlaced");
  EXPECT_EQ(header(headers, "ce-subject"), "4711/a%20b?c#d");
  EXPECT_EQ(header(headers, "ce-time"), "2026-12-03T05:53:12.500000Z");
  EXPECT_EQ(header(headers, "ce-aggregatesequence"), "7");
  EXPECT_EQ(header(headers, "ce-schemaversion"), "2");
  EXPECT_EQ(header(headers, "traceparent"),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(header(headers, "tracestate"), "<absent>");  // a CR LF in it: dropped, not sent
  EXPECT_EQ(header(headers, "Host"), "<absent>");
  const auto plain = event_headers(event, {}, 1700000000, "");
  EXPECT_EQ(header(plain, "webhook-signature"), "<absent>");
  EXPECT_EQ(header(plain, "ce-id"), "<absent>");
  EXPECT_EQ(header(plain, "Idempotency-Key"), id);
}

TEST(EventHeaders, CloudEventsValuesArePercentEncodedOutsidePrintableAscii) {
  EXPECT_EQ(cloudevents_header_value("a\"b%c d\xc3\xa9\r\n"), "a%22b%25c%20d%C3%A9%0D%0A");
  EXPECT_EQ(detail::rfc3339("not a time"), "not a time");
}

TEST(ExtraHeaders, RefuseWhatOutboxSetsAndWhatWouldSplitTheRequest) {
  EXPECT_FALSE(refuse_extra_header("Authorization", "Bearer abc"));
  EXPECT_TRUE(refuse_extra_header("idempotency-key", "x"));
  EXPECT_TRUE(refuse_extra_header("Webhook-Signature", "x"));
  EXPECT_TRUE(refuse_extra_header("ce-id", "x"));
  EXPECT_TRUE(refuse_extra_header("Content-Length", "1"));
  EXPECT_TRUE(refuse_extra_header("X Bad", "x"));
  EXPECT_TRUE(refuse_extra_header("X-Ok", "a\r\nHost: evil"));
}

Response answered(long status, std::string body = {}) {
  Response response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

TEST(Classify, EachResponseMeansWhatTheSinkDocuments) {
  const auto cap = std::chrono::milliseconds(60000);
  EXPECT_EQ(classify(answered(200), false, cap).outcome, DeliveryOutcome::published);
  EXPECT_EQ(classify(answered(204), false, cap).outcome, DeliveryOutcome::published);
  for (const long status : {408L, 409L, 425L, 429L, 500L, 502L, 503L, 504L}) {
    EXPECT_EQ(classify(answered(status), false, cap).outcome, DeliveryOutcome::retryable_failure)
        << status;
  }
  // Where a repeat is not harmless, only the answers that say nothing was done are retried; a
  // 500, 502 or 504 may come after the origin acted.
  for (const long status : {408L, 409L, 425L, 429L, 503L}) {
    EXPECT_EQ(classify(answered(status), true, cap).outcome, DeliveryOutcome::retryable_failure)
        << status;
  }
  for (const long status : {500L, 502L, 504L, 599L}) {
    EXPECT_EQ(classify(answered(status), true, cap).outcome, DeliveryOutcome::in_doubt) << status;
  }
  // A 1xx and then nothing: no answer (curl reports the interim status).
  Response interim = answered(103);
  interim.curl_code = 52;
  EXPECT_EQ(classify(interim, false, cap).outcome, DeliveryOutcome::unknown);
  EXPECT_EQ(classify(interim, true, cap).outcome, DeliveryOutcome::in_doubt);
  for (const long status : {400L, 401L, 403L, 404L, 410L, 422L}) {
    EXPECT_EQ(classify(answered(status), false, cap).outcome, DeliveryOutcome::permanent_failure)
        << status;
  }
  Response redirect = answered(302);
  redirect.location = "https://elsewhere/x";
  const DeliveryReport moved = classify(redirect, false, cap);
  EXPECT_EQ(moved.outcome, DeliveryOutcome::permanent_failure);
  EXPECT_NE(moved.error.find("redirect to https://elsewhere/x not followed"), std::string::npos);

  // One line of well-formed UTF-8 for the row: controls as spaces, a stray byte as '?', a
  // sequence cut by the bound left out; printing escapes what is left.
  const DeliveryReport gone =
      classify(answered(410, "gone\x1b[2J\r\nfor \xff good \xc3\xa9\xed\xa0\x80"), false, cap);
  EXPECT_EQ(gone.error, "HTTP 410: gone [2J  for ? good \xc3\xa9???");
  const DeliveryReport cut =
      classify(answered(400, std::string(199, 'x') + "\xc3\xa9"), false, cap);
  EXPECT_EQ(cut.error, "HTTP 400: " + std::string(199, 'x') + "...");
}

TEST(Classify, RetryAfterIsHonouredUpToTheCap) {
  Response busy = answered(429);
  busy.retry_after_seconds = 30;
  EXPECT_EQ(classify(busy, false, std::chrono::minutes(1)).retry_after, std::chrono::seconds(30));
  busy.retry_after_seconds = 86400;
  EXPECT_EQ(classify(busy, false, std::chrono::minutes(1)).retry_after, std::chrono::minutes(1));
  busy.retry_after_seconds = std::numeric_limits<std::int64_t>::max();  // found by the fuzzer
  EXPECT_EQ(classify(busy, false, std::chrono::minutes(1)).retry_after, std::chrono::minutes(1));
  Response refused = answered(400);
  refused.retry_after_seconds = 30;
  EXPECT_EQ(classify(refused, false, std::chrono::minutes(1)).retry_after.count(), 0);
}

TEST(Classify, NoStatusIsRetriedWhenNothingLeftAndUnknownOrInDoubtWhenItDid) {
  Response refused;
  refused.curl_code = 7;
  refused.curl_error = "Failed to connect";
  refused.request_written = false;
  EXPECT_EQ(classify(refused, true, {}).outcome, DeliveryOutcome::retryable_failure);
  Response timed_out;
  timed_out.curl_code = 28;
  timed_out.curl_error = "Operation timed out";
  EXPECT_EQ(classify(timed_out, false, {}).outcome, DeliveryOutcome::unknown);
  EXPECT_EQ(classify(timed_out, true, {}).outcome, DeliveryOutcome::in_doubt);
  // A status came, then the body broke off: the status is the answer.
  Response late = answered(201);
  late.curl_code = 56;
  EXPECT_EQ(classify(late, true, {}).outcome, DeliveryOutcome::published);
}

}  // namespace
}  // namespace outbox::http
