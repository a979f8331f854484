// The HTTP sink against a receiver of our own (outbox::testing's HttpReceiver, cpp-httplib) and a
// raw TCP peer that breaks connections: what each answer, and each silence, makes of an event.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "http/http_parts.hpp"
#include "outbox/error.hpp"
#include "outbox/http_sink.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/reconcile.hpp"
#include "outbox/status.hpp"
#include "outbox/testing/http_receiver.hpp"
#include "support/relay_fixture.hpp"
#include "support/sink_wake.hpp"

namespace outbox::testing {
namespace {

constexpr const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

Event one_event(const std::string& aggregate_id, std::int64_t sequence) {
  Event event;
  event.event_id = EventId::generate();
  event.aggregate_type = "order";
  event.aggregate_id = aggregate_id;
  event.aggregate_sequence = sequence;
  event.event_type = "Step";
  event.payload = R"({"n":1})";
  event.headers = "{}";
  event.occurred_at = "2026-12-03 07:00:00+00";
  return event;
}

// Sends one event through `sink` and waits for its report.
DeliveryReport deliver(Sink& sink, const Event& event) {
  sink.send(event, 1);
  std::vector<DeliveryReport> reports;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (reports.empty() && std::chrono::steady_clock::now() < until) sink.poll(100ms, reports);
  EXPECT_EQ(reports.size(), 1U);
  return reports.empty() ? DeliveryReport{} : reports.front();
}

// A TCP peer on 127.0.0.1 that reads each request's head and then closes: with a reset
// (SO_LINGER 0) or an orderly close, before any status line.
class BreakingPeer {
 public:
  explicit BreakingPeer(bool reset) : reset_(reset) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    socklen_t size = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    listen(listener_, 16);
    thread_ = std::thread([this] { serve(); });
  }
  ~BreakingPeer() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] int requests() const { return requests_.load(); }

 private:
  void serve() {
    while (!stopping_) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      std::string head;
      char buffer[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const ssize_t got = recv(client, buffer, sizeof(buffer), 0);
        if (got <= 0) break;
        head.append(buffer, static_cast<std::size_t>(got));
      }
      ++requests_;
      if (reset_) {
        const linger hard{1, 0};
        setsockopt(client, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      }
      close(client);
    }
  }
  bool reset_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

HttpSinkOptions to(const std::string& base) {
  HttpSinkOptions options;
  options.url_template = base + "/hooks/{aggregate_type}/{aggregate_id}";
  options.signing_secrets = {kSecret};
  // cpp-httplib's server (Debian's build) listens with a backlog of 5: a burst of connects may
  // see a SYN dropped and resent after 1 s, so the connect timeout leaves room for that.
  options.connect_timeout = 3000ms;
  options.timeout = 5000ms;
  return options;
}

TEST(HttpSink, A2xxIsPublishedWithTheKeyTheSignatureAndTheCloudEventsHeaders) {
  HttpReceiver receiver;
  auto sink = make_http_sink(to(receiver.url()));
  Event event = one_event("a/1", 3);
  event.headers = R"({"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})";
  const DeliveryReport report = deliver(*sink, event);
  EXPECT_EQ(report.outcome, DeliveryOutcome::published) << report.error;
  const auto requests = receiver.requests();
  ASSERT_EQ(requests.size(), 1U);
  const auto& request = requests[0];
  const std::string id = event.event_id.to_string();
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.path, "/hooks/order/a%2F1");
  EXPECT_EQ(request.body, event.payload);
  EXPECT_EQ(request.headers.at("content-type"), "application/json");
  EXPECT_EQ(request.headers.at("idempotency-key"), id);
  EXPECT_EQ(request.headers.at("webhook-id"), id);
  const std::string key = http::decode_webhook_secret(kSecret, nullptr).value();
  EXPECT_EQ(request.headers.at("webhook-signature"),
            http::webhook_signature(key, id, std::stoll(request.headers.at("webhook-timestamp")),
                                    event.payload));
  EXPECT_EQ(request.headers.at("ce-id"), id);
  EXPECT_EQ(request.headers.at("ce-type"), "Step");
  EXPECT_EQ(request.headers.at("ce-aggregatesequence"), "3");
  EXPECT_EQ(request.headers.at("traceparent"),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(sink->in_flight(), 0U);
}

// The relay waits on the sink's descriptor beside its change stream (Sink::wake_fd).
TEST(HttpSink, ItsDescriptorTurnsReadableWithAnAnswerAndPollClearsIt) {
  HttpReceiver receiver;
  auto sink = make_http_sink(to(receiver.url()));
  expect_wake_fd_follows_reports(*sink, one_event("a/1", 1), one_event("a/2", 1));
}

TEST(HttpSink, EachRefusingAnswerIsPermanentAndEachBusyOneRetryableWithItsRetryAfter) {
  HttpReceiver receiver;
  auto sink = make_http_sink(to(receiver.url()));
  receiver.answer_next(1, 410, "subscription gone\n");
  DeliveryReport report = deliver(*sink, one_event("a", 1));
  EXPECT_EQ(report.outcome, DeliveryOutcome::permanent_failure);
  EXPECT_EQ(report.error, "HTTP 410: subscription gone ");
  receiver.answer_next(1, 429, "", "7");
  report = deliver(*sink, one_event("a", 1));
  EXPECT_EQ(report.outcome, DeliveryOutcome::retryable_failure);
  EXPECT_EQ(report.retry_after, 7s);
  receiver.answer_next(1, 503, "", "Wed, 21 Oct 2015 07:28:00 GMT");  // in the past: at once
  report = deliver(*sink, one_event("a", 1));
  EXPECT_EQ(report.outcome, DeliveryOutcome::retryable_failure);
  EXPECT_EQ(report.retry_after, 0ms);
  receiver.answer_next(1, 307);
  report = deliver(*sink, one_event("a", 1));
  EXPECT_EQ(report.outcome, DeliveryOutcome::permanent_failure);
  EXPECT_NE(report.error.find("not followed"), std::string::npos) << report.error;
  EXPECT_EQ(receiver.counts().effects, 0U);
}

TEST(HttpSink, NoListenerIsNotSentAndABrokenOrSilentConnectionIsAnUnknownOutcome) {
  std::uint16_t port = 0;
  {
    const HttpReceiver gone;
    port = gone.port();
  }
  auto refused = make_http_sink(to("http://127.0.0.1:" + std::to_string(port)));
  DeliveryReport report = deliver(*refused, one_event("a", 1));
  EXPECT_EQ(report.outcome, DeliveryOutcome::retryable_failure);
  EXPECT_NE(report.error.find("not sent"), std::string::npos) << report.error;

  for (const bool reset : {true, false}) {
    BreakingPeer peer(reset);
    auto sink = make_http_sink(to(peer.url()));
    report = deliver(*sink, one_event("a", 1));
    EXPECT_EQ(report.outcome, DeliveryOutcome::unknown)
        << "reset " << reset << ": " << report.error;
    EXPECT_NE(report.error.find("no status after the request was sent"), std::string::npos);
    EXPECT_GE(peer.requests(), 1);
  }

  HttpReceiver slow;
  slow.set_delay(3s);
  HttpSinkOptions impatient = to(slow.url());
  impatient.timeout = 1000ms;
  impatient.connect_timeout = 1000ms;
  auto sink = make_http_sink(impatient);
  report = deliver(*sink, one_event("a", 1));
  EXPECT_EQ(report.outcome, DeliveryOutcome::unknown) << report.error;
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (slow.counts().effects == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(slow.counts().effects, 1U) << "the endpoint acted; the relay cannot know";
}

TEST(HttpSink, RefusesOptionsThatCannotWork) {
  const auto refused = [](HttpSinkOptions options, const std::string& why) {
    try {
      make_http_sink(options);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  HttpSinkOptions options = to("http://127.0.0.1:1");
  options.max_timeout = 2000ms;
  refused(options, "below the relay's lease");
  options = to("http://127.0.0.1:1");
  options.method = "GET";
  refused(options, "POST, PUT or PATCH");
  options = to("http://127.0.0.1:1");
  options.headers = {{"Idempotency-Key", "mine"}};
  refused(options, "sets idempotency-key itself");
  options = to("http://127.0.0.1:1");
  options.signing_secrets = {"hunter2"};
  refused(options, "whsec_");
  options = to("http://127.0.0.1:1");
  options.ca_file = "/nonexistent/ca.pem";
  refused(options, "cannot be read");
}

class HttpRelayTest : public RelayFixture {
 protected:
  RelayOptions fast(const std::string& id) {
    RelayOptions o = options(id);
    o.backoff_base = 10ms;
    o.backoff_max = 50ms;
    return o;
  }
  // Runs `relay` until no event is left unpublished (run_until_idle alone returns while a failed
  // event waits for its retry).
  bool drain(Relay& relay, std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      relay.run_until_idle(5s);
      if (unpublished() == 0) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
};

TEST_F(HttpRelayTest, EveryEventArrivesOnceAndInOrderPerAggregate) {
  HttpReceiver receiver({.deduplicate = false});
  const auto ids = enqueue(8, 25);
  Relay relay(fast("r"), make_http_sink(to(receiver.url())));
  ASSERT_TRUE(drain(relay, 60s));
  const auto counts = receiver.counts();
  EXPECT_EQ(counts.effects, ids.size());
  EXPECT_EQ(counts.distinct_keys, ids.size());
  EXPECT_EQ(counts.duplicate_effects, 0U);
  EXPECT_EQ(counts.inversions, 0U);
}

TEST_F(HttpRelayTest, ARefusedEventIsQuarantinedWithTheAnswerAndOnlyItsAggregateWaits) {
  HttpReceiver receiver;
  enqueue(1, 2);  // agg-0: 1, 2
  receiver.answer_next(1, 422, R"({"error":"total must be positive"})");
  Relay relay(fast("r"), make_http_sink(to(receiver.url())));
  ASSERT_TRUE(relay.run_until_idle(30s));
  enqueue(3, 1);  // agg-0 #3, agg-1 #1, agg-2 #1
  ASSERT_TRUE(relay.run_until_idle(30s));
  const auto listed = list_quarantined(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].reason, "permanent failure");
  EXPECT_EQ(listed[0].last_error, R"(HTTP 422: {"error":"total must be positive"})");
  EXPECT_EQ(listed[0].blocked_events, 2) << "agg-0's later events wait behind it";
  EXPECT_EQ(receiver.counts().effects, 2U) << "agg-1 and agg-2 flowed";
}

TEST_F(HttpRelayTest, ABusyAnswerIsRetriedNoSoonerThanItsRetryAfter) {
  HttpReceiver receiver;
  enqueue(1, 1);
  receiver.answer_next(1, 503, "maintenance", "2");
  Relay relay(fast("r"), make_http_sink(to(receiver.url())));
  ASSERT_TRUE(drain(relay, 30s));
  const auto requests = receiver.requests();
  ASSERT_EQ(requests.size(), 2U);
  EXPECT_EQ(requests[0].headers.at("idempotency-key"), requests[1].headers.at("idempotency-key"));
  EXPECT_GE(requests[1].at - requests[0].at, 1900ms)
      << "the backoff alone (10-50 ms) would have retried at once";
}

TEST_F(HttpRelayTest, ATimedOutRequestIsSentAgainWithTheSameKeyAndTheEndpointAppliesItOnce) {
  HttpReceiver receiver;  // deduplicating by Idempotency-Key
  enqueue(2, 2);
  receiver.set_delay(2500ms);
  HttpSinkOptions options = to(receiver.url());
  options.timeout = 1000ms;
  options.connect_timeout = 1000ms;
  Relay relay(fast("r"), make_http_sink(options));
  std::thread heal([&] {
    std::this_thread::sleep_for(1500ms);
    receiver.set_delay(0ms);
  });
  const bool drained = drain(relay, 60s);
  heal.join();
  ASSERT_TRUE(drained);
  const auto counts = receiver.counts();
  EXPECT_GT(counts.requests, 4U) << "the timed-out requests were sent again";
  EXPECT_GE(counts.suppressed, 1U);
  EXPECT_EQ(counts.effects, 4U) << "applied once per event";
  EXPECT_EQ(counts.inversions, 0U);
}

TEST_F(HttpRelayTest, AnEndpointThatWasDownGetsEverythingOnceItIsBack) {
  HttpReceiver receiver;
  receiver.stop();
  const auto ids = enqueue(3, 3);
  Relay relay(fast("r"), make_http_sink(to(receiver.url())));
  relay.run_until_idle(1s);
  EXPECT_EQ(unpublished(), static_cast<long long>(ids.size()));
  EXPECT_GT(relay.stats().failed, 0U);
  receiver.start();
  ASSERT_TRUE(drain(relay, 30s));
  EXPECT_EQ(receiver.counts().effects, ids.size());
  EXPECT_EQ(receiver.counts().inversions, 0U);
}

// Reconcile mode, against a receiver that applies blindly (no idempotency): a request the relay
// got no answer to is never sent again by it. The status URL settles it either way.
class HttpReconcileTest : public HttpRelayTest {
 protected:
  // A short timeout to make events go in doubt; the drains after settling take a long one, so a
  // slow request on a loaded machine does not put another event in doubt.
  HttpSinkOptions reconciling(const std::string& base, std::chrono::milliseconds timeout = 1000ms) {
    HttpSinkOptions options = to(base);
    options.on_unknown = HttpOnUnknown::reconcile;
    options.timeout = timeout;
    options.connect_timeout = std::min<std::chrono::milliseconds>(timeout, 3000ms);
    return options;
  }
  long long where(const std::string& condition) {
    return count(conn(),
                 "SELECT count(*) FROM " + schema_.table("outbox_events") + " WHERE " + condition);
  }
  // Settles what is in doubt by asking the receiver's status URL, as `outbox reconcile check`.
  void reconcile_by_status(const HttpReceiver& receiver) {
    for (const InDoubtEvent& in : list_in_doubt(conn(), schema_)) {
      const HttpStatus status =
          ask_http_status(in.event, {receiver.url() + "/status/{event_id}", {}, {}, 2000ms, false});
      ASSERT_NE(status.answer, HttpStatusAnswer::unknown) << status.detail;
      const std::vector<EventId> one{in.event.event_id};
      const auto settled = settle_in_doubt(
          conn(), schema_, one,
          status.answer == HttpStatusAnswer::happened ? Settlement::published : Settlement::retry,
          "test", "status URL answered " + status.detail);
      EXPECT_EQ(settled.size(), 1U);
    }
  }
};

TEST_F(HttpReconcileTest, ATimeoutAfterTheEffectIsParkedNotRepeatedAndSettledAsPublished) {
  HttpReceiver receiver({.deduplicate = false});
  enqueue(1, 3);  // agg-0 #1..#3
  receiver.set_delay(2000ms);
  Relay relay(fast("r"), make_http_sink(reconciling(receiver.url())));
  relay.run_until_idle(5s);
  receiver.set_delay(0ms);
  relay.run_until_idle(3s);
  EXPECT_EQ(receiver.counts().effects, 1U) << "the first was applied; nothing sent again";
  EXPECT_EQ(relay.stats().in_doubt, 1U);
  EXPECT_EQ(where("in_doubt_at IS NOT NULL AND quarantined_at IS NULL AND "
                  "available_at = 'infinity'"),
            1);
  const OutboxStatus status = read_status(conn(), schema_);
  EXPECT_EQ(status.in_doubt, 1);
  EXPECT_EQ(status.pending, 2) << "its successors wait; the one in doubt is counted apart";
  const auto listed = list_in_doubt(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].event.aggregate_sequence, 1);
  EXPECT_EQ(listed[0].blocked_events, 2);
  EXPECT_NE(listed[0].reason.find("no status after the request was sent"), std::string::npos)
      << listed[0].reason;
  // `quarantine retry` must not send it again.
  const std::vector<EventId> id{listed[0].event.event_id};
  EXPECT_EQ(retry_quarantined(conn(), schema_, id, "test"), 0U);

  reconcile_by_status(receiver);
  Relay patient(fast("r2"), make_http_sink(reconciling(receiver.url(), 10000ms)));
  ASSERT_TRUE(drain(patient, 30s));
  const auto counts = receiver.counts();
  EXPECT_EQ(counts.effects, 3U);
  EXPECT_EQ(counts.duplicate_effects, 0U) << "the mode exists to prevent these";
  EXPECT_EQ(counts.inversions, 0U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_operator_audit") +
                              " WHERE action = 'reconcile_published' AND actor = 'test'"),
            1);
}

TEST_F(HttpReconcileTest, AConnectionBrokenBeforeTheEffectIsSettledBySendingAgain) {
  HttpReceiver receiver({.deduplicate = false});
  enqueue(2, 1);  // agg-0 #1, agg-1 #1
  std::string status_base;
  {
    BreakingPeer peer(/*reset=*/true);
    Relay relay(fast("r"), make_http_sink(reconciling(peer.url())));
    relay.run_until_idle(5s);
    EXPECT_EQ(relay.stats().in_doubt, 2U);
  }
  EXPECT_EQ(where("in_doubt_at IS NOT NULL"), 2);
  reconcile_by_status(receiver);  // 404: never applied there
  EXPECT_EQ(where("in_doubt_at IS NULL AND available_at <= now() AND attempt_count = 0"), 2);
  Relay relay(fast("r2"), make_http_sink(reconciling(receiver.url(), 10000ms)));
  ASSERT_TRUE(drain(relay, 30s));
  EXPECT_EQ(receiver.counts().effects, 2U);
  EXPECT_EQ(receiver.counts().duplicate_effects, 0U);
}

// A relay killed between its request and its mark leaves the row claimed: the relay that takes
// it over cannot tell whether it was sent, so in reconcile mode it parks it instead of sending.
TEST_F(HttpReconcileTest, AnEventTakenOverFromADeadClaimIsParkedNotSent) {
  HttpReceiver receiver({.deduplicate = false});
  enqueue(2, 1);  // agg-0 #1, agg-1 #1
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'gone:1', claim_until = now() - interval '1 s'"
                       " WHERE aggregate_id = 'agg-0'");
  Relay relay(fast("r"), make_http_sink(reconciling(receiver.url())));
  relay.run_until_idle(5s);
  EXPECT_EQ(receiver.counts().requests, 1U) << "agg-1 only";
  const auto listed = list_in_doubt(conn(), schema_);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].event.aggregate_id, "agg-0");
  EXPECT_NE(listed[0].reason.find("taken over"), std::string::npos) << listed[0].reason;
  EXPECT_EQ(relay.stats().health, Health::running) << "a takeover says nothing of the endpoint";

  // In retry mode the same row is simply sent (its key makes a repeat harmless).
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET in_doubt_at = NULL, available_at = now(), claimed_by = 'gone:1',"
                       " claim_until = now() - interval '1 s' WHERE aggregate_id = 'agg-0'");
  Relay retrying(fast("r2"), make_http_sink(to(receiver.url())));
  ASSERT_TRUE(drain(retrying, 30s));
  EXPECT_EQ(receiver.counts().requests, 2U);
}

// The park is written at once even when nothing else is in flight (no report would bring it
// out): before, it waited in memory until the lease ran out and another relay parked it again,
// round and round.
TEST_F(HttpReconcileTest, AnEventParkedAloneIsWrittenBeforeItsLeaseRunsOut) {
  HttpReceiver receiver({.deduplicate = false});
  enqueue(1, 1);
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'gone:1', claim_until = now() - interval '1 s'");
  Relay relay(fast("r"), make_http_sink(reconciling(receiver.url())));
  relay.run_until_idle(5s);
  EXPECT_EQ(receiver.counts().requests, 0U);
  EXPECT_EQ(list_in_doubt(conn(), schema_).size(), 1U);
  EXPECT_EQ(where("in_doubt_at IS NOT NULL AND claimed_by IS NULL"), 1);
}

TEST_F(HttpReconcileTest, ACdcRelayIsRefused) {
  RelayOptions options = fast("r");
  options.source = RelaySource::cdc;
  try {
    Relay relay(options, make_http_sink(reconciling("http://127.0.0.1:1")));
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--source polling"), std::string::npos) << e.what();
  }
}

TEST_F(HttpReconcileTest, AnOperatorsDecisionIsAuditedAndOnlyForEventsInDoubt) {
  enqueue(3, 1);
  {
    BreakingPeer peer(/*reset=*/false);
    Relay relay(fast("r"), make_http_sink(reconciling(peer.url())));
    relay.run_until_idle(5s);
  }
  const auto listed = list_in_doubt(conn(), schema_);
  ASSERT_EQ(listed.size(), 3U);
  const EventId a = listed[0].event.event_id, b = listed[1].event.event_id,
                c = listed[2].event.event_id;
  EXPECT_THROW(
      settle_in_doubt(conn(), schema_, std::vector<EventId>{a}, Settlement::skip, "ops", ""),
      InvalidArgument);
  EXPECT_THROW(settle_in_doubt(conn(), schema_, std::vector<EventId>{a}, Settlement::skip, "ops",
                               "bad\nline"),
               InvalidArgument);
  EXPECT_EQ(settle_in_doubt(conn(), schema_, std::vector<EventId>{a}, Settlement::published, "ops",
                            "provider dashboard shows it")
                .size(),
            1U);
  EXPECT_EQ(settle_in_doubt(conn(), schema_, std::vector<EventId>{b}, Settlement::skip, "ops",
                            "customer cancelled")
                .size(),
            1U);
  const auto again = settle_in_doubt(conn(), schema_, std::vector<EventId>{a, c}, Settlement::retry,
                                     "ops", "retry the rest");
  ASSERT_EQ(again.size(), 1U);
  EXPECT_EQ(again[0], c);
  const auto why = not_in_doubt(conn(), schema_, std::vector<EventId>{a, b, c});
  ASSERT_EQ(why.size(), 3U);
  EXPECT_NE(why[0].find("published at"), std::string::npos) << why[0];
  EXPECT_NE(why[1].find("skipped at"), std::string::npos) << why[1];
  EXPECT_NE(why[2].find("pending, not in doubt"), std::string::npos) << why[2];
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_operator_audit") +
                              " WHERE actor = 'ops' AND action LIKE 'reconcile_%'"),
            3);
}

}  // namespace
}  // namespace outbox::testing
