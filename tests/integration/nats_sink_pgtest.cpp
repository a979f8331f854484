// The NATS JetStream sink against a real nats-server (Debian's, started once for this program):
// what a PubAck, a duplicate, a refusal and a silence make of an event, what the stream check
// refuses, and a relay's events on the stream once each and in order per aggregate.

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <map>
#include <set>

#include "nats/nats_common.hpp"
#include "outbox/error.hpp"
#include "outbox/nats_sink.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/testing/nats_server.hpp"
#include "support/relay_fixture.hpp"
#include "support/sink_wake.hpp"

namespace outbox::testing {
namespace {

Event one_event(const std::string& aggregate_id, std::int64_t sequence,
                const std::string& type = "order") {
  Event event;
  event.event_id = EventId::generate();
  event.aggregate_type = type;
  event.aggregate_id = aggregate_id;
  event.aggregate_sequence = sequence;
  event.event_type = "Step";
  event.schema_version = 2;
  event.payload = R"({"n":1})";
  event.headers = R"({"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",)"
                  R"("Nats-Expected-Stream":"ELSEWHERE","event_id":"forged"})";
  event.occurred_at = "2026-12-03 07:00:00+00";
  return event;
}

DeliveryReport deliver(Sink& sink, const Event& event) {
  sink.send(event, 1);
  std::vector<DeliveryReport> reports;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (reports.empty() && std::chrono::steady_clock::now() < until) sink.poll(100ms, reports);
  EXPECT_EQ(reports.size(), 1U);
  return reports.empty() ? DeliveryReport{} : reports.front();
}

// A client of its own to set streams up and read them back.
class Admin {
 public:
  Admin() {
    options_ = nats::make_options({nats_server().url(), "test-admin", 2000ms, "", ""});
    connection_ = nats::connect(options_.get(), true);
    jsCtx* js = nullptr;
    EXPECT_EQ(natsConnection_JetStream(&js, connection_.get(), nullptr), NATS_OK);
    js_.reset(js);
  }
  void add_stream(const std::string& name, const std::string& subjects,
                  std::chrono::seconds window = 120s, bool memory = false) {
    jsStreamConfig config;
    jsStreamConfig_Init(&config);
    const char* list[] = {subjects.c_str()};
    config.Name = name.c_str();
    config.Subjects = list;
    config.SubjectsLen = 1;
    config.Storage = memory ? js_MemoryStorage : js_FileStorage;
    config.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(window).count();
    jsStreamInfo* info = nullptr;
    ASSERT_EQ(js_AddStream(&info, js_.get(), &config, nullptr, nullptr), NATS_OK)
        << nats::error_text(NATS_ERR);
    jsStreamInfo_Destroy(info);
  }
  std::uint64_t messages(const std::string& stream) {
    jsStreamInfo* raw = nullptr;
    if (js_GetStreamInfo(&raw, js_.get(), stream.c_str(), nullptr, nullptr) != NATS_OK) return 0;
    const nats::StreamInfoHandle info(raw);
    return info->State.Msgs;
  }
  nats::MessageHandle get(const std::string& stream, std::uint64_t sequence) {
    natsMsg* message = nullptr;
    EXPECT_EQ(js_GetMsg(&message, js_.get(), stream.c_str(), sequence, nullptr, nullptr), NATS_OK);
    return nats::MessageHandle(message);
  }
  static std::string header(natsMsg* message, const char* name) {
    const char* value = nullptr;
    return natsMsgHeader_Get(message, name, &value) == NATS_OK && value != nullptr ? value : "";
  }

 private:
  nats::OptionsHandle options_;
  nats::ConnectionHandle connection_;
  nats::ContextHandle js_;
};

NatsSinkOptions to_stream(const std::string& stream, const std::string& prefix) {
  NatsSinkOptions options;
  options.servers = nats_server().url();
  options.stream = stream;
  options.subject_template = prefix + ".{aggregate_type}.{partition}";
  options.ack_timeout = 2000ms;
  return options;
}

TEST(NatsSink, APubAckPublishesAndTheMessageCarriesTheEventIdAsItsMsgId) {
  Admin admin;
  admin.add_stream("ONE", "one.>");
  NatsSinkOptions options = to_stream("ONE", "one");
  options.cloudevents_source = "/orders";
  auto sink = make_nats_sink(options);
  const Event event = one_event("order-7", 3);
  const DeliveryReport report = deliver(*sink, event);
  ASSERT_EQ(report.outcome, DeliveryOutcome::published) << report.error;
  EXPECT_EQ(report.offset, 1) << "the stream sequence";
  const auto message = admin.get("ONE", 1);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(std::string(natsMsg_GetSubject(message.get())), render_nats_subject(options, event));
  EXPECT_EQ(std::string(natsMsg_GetData(message.get()), natsMsg_GetDataLength(message.get())),
            event.payload);
  const std::string id = event.event_id.to_string();
  EXPECT_EQ(Admin::header(message.get(), "Nats-Msg-Id"), id);
  EXPECT_EQ(Admin::header(message.get(), "event_id"), id) << "not the event's forged one";
  EXPECT_EQ(Admin::header(message.get(), "aggregate_id"), "order-7");
  EXPECT_EQ(Admin::header(message.get(), "aggregate_sequence"), "3");
  EXPECT_EQ(Admin::header(message.get(), "schema_version"), "2");
  EXPECT_EQ(Admin::header(message.get(), "traceparent"),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(Admin::header(message.get(), "ce-id"), id);
  EXPECT_EQ(Admin::header(message.get(), "ce-source"), "/orders");
  EXPECT_EQ(Admin::header(message.get(), "ce-specversion"), "1.0");
  EXPECT_EQ(Admin::header(message.get(), "Nats-Expected-Stream"), "ONE")
      << "the event's own Nats- header never steers the server";
}

// The relay waits on the sink's descriptor beside its change stream (Sink::wake_fd).
TEST(NatsSink, ItsDescriptorTurnsReadableWithAPubAckAndPollClearsIt) {
  Admin admin;
  admin.add_stream("WAKE", "wake.>");
  auto sink = make_nats_sink(to_stream("WAKE", "wake"));
  expect_wake_fd_follows_reports(*sink, one_event("order-1", 1), one_event("order-2", 1));
}

TEST(NatsSink, ASecondSendOfOneEventIsADuplicatePubAckNotASecondMessage) {
  Admin admin;
  admin.add_stream("TWO", "two.>");
  auto sink = make_nats_sink(to_stream("TWO", "two"));
  const Event event = one_event("order-1", 1);
  ASSERT_EQ(deliver(*sink, event).outcome, DeliveryOutcome::published);
  ASSERT_EQ(deliver(*sink, event).outcome, DeliveryOutcome::published);
  EXPECT_EQ(admin.messages("TWO"), 1U);
  std::int64_t duplicates = -1;
  for (const auto& sample : sink->stats()) {
    if (std::string(sample.def->metric) == "outbox_relay_nats_duplicates_total") {
      duplicates = sample.value;
    }
  }
  EXPECT_EQ(duplicates, 1);
}

std::string config_error_of(const NatsSinkOptions& options) {
  auto sink = make_nats_sink(options);
  try {
    deliver(*sink, one_event("order-1", 1));
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(NatsSink, AStreamOutboxMustNotPublishToStopsTheRelayWithWhatToDo) {
  Admin admin;
  EXPECT_NE(config_error_of(to_stream("MISSING", "missing")).find("does not exist"),
            std::string::npos);
  admin.add_stream("SHORT", "short.>", 10s);
  NatsSinkOptions options = to_stream("SHORT", "short");
  options.longest_retry = 60s;
  EXPECT_NE(config_error_of(options).find("--dupe-window 120s"), std::string::npos);
  admin.add_stream("MEMORY", "memory.>", 120s, true);
  EXPECT_NE(config_error_of(to_stream("MEMORY", "memory")).find("in memory"), std::string::npos);
  options = to_stream("MEMORY", "memory");
  options.allow_memory_storage = true;
  auto sink = make_nats_sink(options);
  EXPECT_EQ(deliver(*sink, one_event("order-1", 1)).outcome, DeliveryOutcome::published);
}

TEST(NatsSink, CreatesTheStreamWhenAskedWithAWindowThatOutlastsTheRetries) {
  Admin admin;
  NatsSinkOptions options = to_stream("MADE", "made");
  options.create_stream = true;
  options.longest_retry = 5min;
  auto sink = make_nats_sink(options);
  EXPECT_EQ(deliver(*sink, one_event("order-1", 1)).outcome, DeliveryOutcome::published);
  EXPECT_EQ(admin.messages("MADE"), 1U);
}

// A template whose subjects the stream does not take (here another stream's) stops the relay
// before anything is sent; were the stream changed later, Nats-Expected-Stream would refuse each
// publish instead of storing it elsewhere.
TEST(NatsSink, AStreamThatDoesNotTakeTheTemplatesSubjectsStopsTheRelayAndNothingIsStored) {
  Admin admin;
  admin.add_stream("THEIRS", "theirs.>");
  admin.add_stream("OURS", "ours.>");
  EXPECT_NE(config_error_of(to_stream("OURS", "theirs")).find("does not take every subject"),
            std::string::npos);
  EXPECT_EQ(admin.messages("THEIRS"), 0U);
  EXPECT_EQ(admin.messages("OURS"), 0U);
}

TEST(NatsSink, ATypeThatMakesAnIllegalSubjectIsPermanent) {
  Admin admin;
  admin.add_stream("BAD", "bad.>");
  auto sink = make_nats_sink(to_stream("BAD", "bad"));
  sink->send(one_event("order-1", 1, "two words"), 1);
  EXPECT_TRUE(wake_fd_readable(sink->wake_fd(), 0ms)) << "refused at once: readable at once";
  std::vector<DeliveryReport> reports;
  sink->poll(0ms, reports);
  ASSERT_EQ(reports.size(), 1U);
  const DeliveryReport& report = reports[0];
  EXPECT_EQ(report.outcome, DeliveryOutcome::permanent_failure);
  EXPECT_NE(report.error.find("whitespace"), std::string::npos) << report.error;
}

// A relay may start before its server: the sink is built at once, each send is a retryable
// failure until a server answers, then the stream is checked and sends go through.
TEST(NatsSink, AServerDownAtStartIsRetriedUntilItComesUp) {
  {
    Admin admin;
    admin.add_stream("LATE", "late.>");
  }
  nats_server().stop();
  const auto started = std::chrono::steady_clock::now();
  auto sink = make_nats_sink(to_stream("LATE", "late"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s) << "building waits for no server";
  const DeliveryReport down = deliver(*sink, one_event("order-1", 1));
  EXPECT_EQ(down.outcome, DeliveryOutcome::retryable_failure) << down.error;
  nats_server().start();
  DeliveryReport up;
  const auto until = std::chrono::steady_clock::now() + 20s;
  do {
    up = deliver(*sink, one_event("order-1", 1));
  } while (up.outcome != DeliveryOutcome::published && std::chrono::steady_clock::now() < until);
  EXPECT_EQ(up.outcome, DeliveryOutcome::published) << up.error;
}

// A sink destroyed while its server is down and sends are pending: nats.c's handlers must not
// run into the destroyed object (ASan's build of this test would see it), and no send waits
// long for the stream check.
TEST(NatsSink, ASinkGoesCleanlyWhileItsServerIsDownWithSendsPending) {
  {
    Admin admin;
    admin.add_stream("GONE", "gone.>");
  }
  NatsSinkOptions options = to_stream("GONE", "gone");
  options.ack_timeout = 500ms;
  auto sink = make_nats_sink(options);
  ASSERT_EQ(deliver(*sink, one_event("order-0", 1)).outcome, DeliveryOutcome::published);
  nats_server().stop(true);
  const auto started = std::chrono::steady_clock::now();
  for (int i = 1; i <= 20; ++i) sink->send(one_event("order-" + std::to_string(i), 1), i + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s) << "no send waits for the server";
  sink.reset();
  nats_server().start();
}

class NatsRelayTest : public RelayFixture {
 protected:
  RelayOptions fast(const std::string& id) {
    RelayOptions o = options(id);
    o.backoff_base = 10ms;
    o.backoff_max = 200ms;
    return o;
  }
  bool drain(Relay& relay, std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      relay.run_until_idle(5s);
      if (unpublished() == 0) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  // Every message of `stream`: event ids in stream order, and per aggregate its sequences.
  void expect_once_in_order(Admin& admin, const std::string& stream,
                            const std::vector<EventId>& ids) {
    const std::uint64_t count = admin.messages(stream);
    std::set<std::string> seen;
    std::map<std::string, long long> last;
    long long inversions = 0;
    for (std::uint64_t seq = 1; seq <= count; ++seq) {
      const auto message = admin.get(stream, seq);
      ASSERT_NE(message, nullptr);
      seen.insert(Admin::header(message.get(), "event_id"));
      const std::string aggregate = Admin::header(message.get(), "aggregate_id");
      const long long sequence = std::stoll(Admin::header(message.get(), "aggregate_sequence"));
      if (sequence <= last[aggregate]) ++inversions;
      last[aggregate] = sequence;
    }
    EXPECT_EQ(count, ids.size()) << "one message per event";
    EXPECT_EQ(seen.size(), ids.size());
    EXPECT_EQ(inversions, 0);
  }
};

TEST_F(NatsRelayTest, EveryEventReachesTheStreamOnceAndInOrderPerAggregate) {
  Admin admin;
  const std::string stream = "R" + schema_.name();
  NatsSinkOptions options = to_stream(stream, "r" + schema_.name());
  options.create_stream = true;
  const auto ids = enqueue(8, 25);
  Relay relay(fast("r"), make_nats_sink(options));
  ASSERT_TRUE(drain(relay, 60s));
  expect_once_in_order(admin, stream, ids);
}

TEST_F(NatsRelayTest, AServerKilledMidStreamLosesNothingAndStoresNothingTwice) {
  Admin admin;
  const std::string stream = "K" + schema_.name();
  NatsSinkOptions options = to_stream(stream, "k" + schema_.name());
  options.create_stream = true;
  options.ack_timeout = 1000ms;
  auto ids = enqueue(4, 10);
  Relay relay(fast("r"), make_nats_sink(options));
  ASSERT_TRUE(drain(relay, 30s));
  nats_server().stop(true);
  const auto more = enqueue(4, 10, false, 10);
  ids.insert(ids.end(), more.begin(), more.end());
  relay.run_until_idle(2s);
  EXPECT_GT(unpublished(), 0) << "nothing can be published while the server is down";
  nats_server().start();
  ASSERT_TRUE(drain(relay, 60s));
  expect_once_in_order(admin, stream, ids);
}

}  // namespace
}  // namespace outbox::testing
