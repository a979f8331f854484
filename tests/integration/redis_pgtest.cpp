// The Redis Streams sink and inbox consumer against a real redis-server (Debian's, started once
// for this program with an append-only file fsynced on each write). What a reply, a repeat within
// the dedup window, an error and a lost connection make of an event; trimming that waits for the
// consumer groups; events a relay published applied once each and in order per aggregate; a
// consumer's streams and pending entries taken over after its lock lapsed; the audit by range.

#include <gtest/gtest.h>

#include <thread>

#include "common/fault.hpp"
#include "outbox/error.hpp"
#include "outbox/partition.hpp"
#include "outbox/redis_audit.hpp"
#include "outbox/redis_consumer.hpp"
#include "outbox/redis_sink.hpp"
#include "redis/redis_common.hpp"
#include "support/consumer_effects.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

// A client of the test's own, for what happens behind the sink's and consumer's backs.
class Admin {
 public:
  Admin() : connection_(redis::parse_url(redis_server().url()), 5000ms) {}
  redis::Reply run(const std::vector<std::string_view>& args) { return connection_.command(args); }
  long long integer(const std::vector<std::string_view>& args) { return run(args)->integer; }
  long long length(const std::string& stream) { return integer({"XLEN", stream}); }

 private:
  redis::Connection connection_;
};

Event one_event(const std::string& aggregate_id, std::int64_t sequence) {
  Event event;
  event.event_id = EventId::generate();
  event.aggregate_type = "order";
  event.aggregate_id = aggregate_id;
  event.aggregate_sequence = sequence;
  event.event_type = "Step";
  event.schema_version = 2;
  event.payload = R"({"n":1})";
  event.headers = R"({"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})";
  event.occurred_at = "2026-12-03 07:00:00+00";
  return event;
}

std::vector<DeliveryReport> deliver_all(Sink& sink, const std::vector<Event>& events) {
  for (std::size_t i = 0; i < events.size(); ++i) sink.send(events[i], i + 1);
  std::vector<DeliveryReport> reports;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (reports.size() < events.size() && std::chrono::steady_clock::now() < until) {
    sink.poll(100ms, reports);
  }
  EXPECT_EQ(reports.size(), events.size());
  return reports;
}

DeliveryReport deliver(Sink& sink, const Event& event) {
  const auto reports = deliver_all(sink, {event});
  return reports.empty() ? DeliveryReport{} : reports.front();
}

std::int64_t stat(const Sink& sink, std::string_view key) {
  for (const auto& sample : sink.stats()) {
    if (sample.def->key == key) return sample.value;
  }
  return -1;
}

RedisSinkOptions to_streams(const std::string& prefix) {
  RedisSinkOptions options;
  options.url = redis_server().url();
  options.stream_template = prefix + ":{aggregate_type}:{partition}";
  options.partitions = 4;
  options.reply_timeout = 3000ms;
  return options;
}

TEST(RedisSink, AReplyPublishesAndTheEntryCarriesTheEvent) {
  const RedisSinkOptions options = to_streams("s.one");
  auto sink = make_redis_sink(options);
  const Event event = one_event("order-1", 7);
  const DeliveryReport report = deliver(*sink, event);
  ASSERT_EQ(report.outcome, DeliveryOutcome::published) << report.error;
  const std::string stream = render_redis_stream(options, event);
  EXPECT_EQ(stream, "s.one:order:" + std::to_string(aggregate_partition("order-1", 4)));
  Admin admin;
  const redis::Reply entries = admin.run({"XRANGE", stream, "-", "+"});
  ASSERT_EQ(entries->elements, 1U);
  const ConsumedEvent back = redis::decode_entry(entries->element[0]->element[1]);
  EXPECT_EQ(back.event_id, event.event_id);
  EXPECT_EQ(back.aggregate_id, "order-1");
  EXPECT_EQ(back.aggregate_sequence, 7);
  EXPECT_EQ(back.schema_version, 2);
  EXPECT_EQ(back.payload, event.payload);
  EXPECT_EQ(back.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(redis::text(redis::field(entries->element[0]->element[1], "occurred_at")),
            event.occurred_at);
}

// The relay polls without waiting while it is busy claiming (poll(0)): replies must be read then
// too, or nothing is ever published under load.
TEST(RedisSink, RepliesAreTakenWhenThePollDoesNotWait) {
  auto sink = make_redis_sink(to_streams("s.busy"));
  for (std::uint64_t t = 1; t <= 2000; ++t)
    sink->send(one_event("order-" + std::to_string(t % 50), 1), t);
  std::vector<DeliveryReport> reports;
  std::vector<DeliveryReport> taken;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (reports.size() < 2000 && std::chrono::steady_clock::now() < until) {
    sink->poll(0ms, taken);
    reports.insert(reports.end(), taken.begin(), taken.end());
    taken.clear();
  }
  ASSERT_EQ(reports.size(), 2000U);
  for (const auto& r : reports) ASSERT_EQ(r.outcome, DeliveryOutcome::published) << r.error;
  EXPECT_EQ(sink->in_flight(), 0U);
}

TEST(RedisSink, AResendWithinTheDedupWindowAppendsNothingAfterItASecondEntry) {
  RedisSinkOptions options = to_streams("s.dedup");
  options.dedup_window = 400ms;
  auto sink = make_redis_sink(options);
  const Event event = one_event("order-1", 1);
  const auto reports = deliver_all(*sink, {event, event});
  for (const auto& r : reports) EXPECT_EQ(r.outcome, DeliveryOutcome::published) << r.error;
  Admin admin;
  EXPECT_EQ(admin.length(render_redis_stream(options, event)), 1);
  EXPECT_EQ(stat(*sink, "redis_duplicates"), 1);
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(deliver(*sink, event).outcome, DeliveryOutcome::published);
  EXPECT_EQ(admin.length(render_redis_stream(options, event)), 2)
      << "after the window a repeat is a second entry (the consumer's inbox absorbs it)";
}

TEST(RedisSink, AServerThatCanLoseAcknowledgedEntriesIsRefusedUnlessAccepted) {
  RedisServer volatile_server(RedisServerOptions{false, {}});
  RedisSinkOptions options = to_streams("s.volatile");
  options.url = volatile_server.url();
  auto sink = make_redis_sink(options);
  {
    // A server that skips the fsync while it rewrites its AOF or saves a snapshot.
    Admin admin;
    admin.run({"CONFIG", "SET", "no-appendfsync-on-rewrite", "yes"});
    auto skipping = make_redis_sink(to_streams("s.rewrite"));
    try {
      skipping->send(one_event("order-1", 1), 1);
      ADD_FAILURE() << "a server with no-appendfsync-on-rewrite yes was accepted";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("no-appendfsync-on-rewrite"), std::string::npos)
          << error.what();
    }
    admin.run({"CONFIG", "SET", "no-appendfsync-on-rewrite", "no"});
  }
  try {
    sink->send(one_event("order-1", 1), 1);
    FAIL() << "a server without appendfsync always was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("appendfsync always"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("--redis-allow-volatile-acks"), std::string::npos);
  }
  options.allow_volatile_acks = true;
  auto accepting = make_redis_sink(options);
  EXPECT_EQ(deliver(*accepting, one_event("order-1", 1)).outcome, DeliveryOutcome::published);
}

TEST(RedisSink, AKeyOfAnotherTypeIsAPermanentFailureThatSaysWhichKey) {
  const RedisSinkOptions options = to_streams("s.wrongtype");
  const Event event = one_event("order-1", 1);
  Admin admin;
  admin.run({"SET", render_redis_stream(options, event), "not a stream"});
  auto sink = make_redis_sink(options);
  const DeliveryReport report = deliver(*sink, event);
  EXPECT_EQ(report.outcome, DeliveryOutcome::permanent_failure);
  EXPECT_NE(report.error.find("is not a stream"), std::string::npos) << report.error;
  EXPECT_EQ(stat(*sink, "redis_errors"), 1);
  EXPECT_EQ(deliver(*sink, one_event("order-2", 1)).outcome, DeliveryOutcome::published)
      << "the connection goes on";
}

TEST(RedisSink, BadOptionsAreRefusedWithWhatToChange) {
  const auto refused = [](RedisSinkOptions options, const std::string& says) {
    try {
      make_redis_sink(options);
      ADD_FAILURE() << "accepted; wanted: " << says;
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
    }
  };
  RedisSinkOptions o = to_streams("s.bad");
  o.stream_template = "outbox:{event_type}:{partition}";
  refused(o, "{event_type} is not allowed");
  o = to_streams("s.bad");
  o.stream_template = "outbox:{aggregate_id}";
  refused(o, "{aggregate_id} is not allowed");
  o = to_streams("s.bad");
  o.partitions = 0;
  refused(o, "partitions must be 1 to 4096");
  o = to_streams("s.bad");
  o.url = "rediss://secret@host:6380";
  refused(o, "TLS");
  o = to_streams("s.bad");
  o.url = "redis://user:hunter2@host:port";
  try {
    make_redis_sink(o);
    ADD_FAILURE() << "a port that is no number was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()).find("hunter2"), std::string::npos) << error.what();
  }
  o = to_streams("s.bad");
  o.min_dedup_window = 200s;
  refused(o, "raise --redis-dedup-window");
  o = to_streams("s.bad");
  o.max_reply_timeout = 2000ms;
  refused(o, "must end before the claim's lease");
}

TEST(RedisSink, AServerThatStopsReadingFailsSendsInsteadOfBlockingThem) {
  RedisSinkOptions options = to_streams("s.stall");
  options.max_unsent_bytes = 256 * 1024;
  options.reply_timeout = 1500ms;
  auto sink = make_redis_sink(options);
  ASSERT_EQ(deliver(*sink, one_event("order-1", 1)).outcome, DeliveryOutcome::published);
  redis_server().pause();
  Event big = one_event("order-1", 2);
  big.payload = "\"" + std::string(64 * 1024, 'x') + "\"";
  const auto started = std::chrono::steady_clock::now();
  std::vector<DeliveryReport> reports;
  for (std::uint64_t t = 0; t < 200; ++t) sink->send(big, 100 + t);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s) << "send() blocked";
  while (reports.size() < 200 && std::chrono::steady_clock::now() - started < 10s) {
    sink->poll(100ms, reports);
  }
  redis_server().resume();
  EXPECT_EQ(reports.size(), 200U);
  EXPECT_GE(stat(*sink, "redis_send_stalls"), 1);
  EXPECT_GE(stat(*sink, "redis_reply_timeouts"), 1) << "what was written and never answered";
  for (const auto& r : reports) EXPECT_NE(r.outcome, DeliveryOutcome::published);
  DeliveryReport again;
  for (int i = 0; i < 50 && again.outcome != DeliveryOutcome::published; ++i) {
    again = deliver(*sink, one_event("order-1", 3));
    if (again.outcome != DeliveryOutcome::published) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(again.outcome, DeliveryOutcome::published) << again.error;
}

TEST(RedisSink, AServerKilledMakesUnansweredSendsUnknownAndTheSinkReconnects) {
  const RedisSinkOptions options = to_streams("s.restart");
  auto sink = make_redis_sink(options);
  const Event first = one_event("order-1", 1);
  ASSERT_EQ(deliver(*sink, first).outcome, DeliveryOutcome::published);
  redis_server().stop(true);
  const DeliveryReport lost = deliver(*sink, one_event("order-1", 2));
  EXPECT_TRUE(lost.outcome == DeliveryOutcome::unknown ||
              lost.outcome == DeliveryOutcome::retryable_failure)
      << to_string(lost.outcome) << ": " << lost.error;
  redis_server().start();
  DeliveryReport again;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (again.outcome != DeliveryOutcome::published && std::chrono::steady_clock::now() < until) {
    again = deliver(*sink, one_event("order-1", 2));
    if (again.outcome != DeliveryOutcome::published) std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(again.outcome, DeliveryOutcome::published) << again.error;
  EXPECT_EQ(stat(*sink, "redis_reconnects"), 1);
  EXPECT_GE(Admin().length(render_redis_stream(options, first)), 2)
      << "the acknowledged entry survived the kill (appendfsync always)";
}

TEST(RedisSink, TrimmingNeverDropsAnEntryAConsumerGroupHasNotAcknowledged) {
  RedisSinkOptions options = to_streams("s.trim");
  options.partitions = 1;
  options.retention = 1ms;
  options.trim_interval = 1ms;
  const Event event = one_event("order-1", 1);
  const std::string stream = render_redis_stream(options, event);
  Admin admin;
  admin.run({"XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"});
  auto sink = make_redis_sink(options);
  std::vector<Event> events;
  for (int i = 1; i <= 10; ++i) events.push_back(one_event("order-1", i));
  deliver_all(*sink, events);
  std::this_thread::sleep_for(20ms);
  deliver(*sink, one_event("order-1", 11));
  EXPECT_EQ(admin.length(stream), 11) << "the group read none: nothing trimmed";
  EXPECT_GT(stat(*sink, "redis_trim_held_back_ms"), 0);
  EXPECT_LT(stat(*sink, "redis_trim_held_back_ms"), 10000) << "the first entry's age, no more";
  // The group reads six and acknowledges five: the sixth (pending) and what follows stay.
  const redis::Reply read =
      admin.run({"XREADGROUP", "GROUP", "g", "c", "COUNT", "6", "STREAMS", stream, ">"});
  const redisReply* list = read->element[0]->element[1];
  ASSERT_EQ(list->elements, 6U);
  for (std::size_t i = 0; i < 5; ++i) {
    admin.run({"XACK", stream, "g", redis::text(list->element[i]->element[0])});
  }
  std::this_thread::sleep_for(20ms);
  deliver(*sink, one_event("order-1", 12));
  EXPECT_EQ(admin.length(stream), 7) << "5 acknowledged entries trimmed, the pending one kept";
  EXPECT_EQ(stat(*sink, "redis_trimmed"), 5);
  const redis::Reply first = admin.run({"XRANGE", stream, "-", "+", "COUNT", "1"});
  EXPECT_EQ(redis::text(first->element[0]->element[0]), redis::text(list->element[5]->element[0]));
  // The group reads and acknowledges the rest: nothing is held back any more.
  const redis::Reply rest = admin.run({"XREADGROUP", "GROUP", "g", "c", "STREAMS", stream, ">"});
  admin.run({"XACK", stream, "g", redis::text(list->element[5]->element[0])});
  for (std::size_t i = 0; i < rest->element[0]->element[1]->elements; ++i) {
    admin.run(
        {"XACK", stream, "g", redis::text(rest->element[0]->element[1]->element[i]->element[0])});
  }
  std::this_thread::sleep_for(20ms);
  deliver(*sink, one_event("order-1", 13));
  EXPECT_EQ(stat(*sink, "redis_trim_held_back_ms"), 0);
  EXPECT_LE(admin.length(stream), 1);
}

class RedisTest : public RelayFixture {
 protected:
  void SetUp() override {
    RelayFixture::SetUp();
    prefix_ = "t." + schema_.name();
    effects_ = std::make_unique<ConsumerEffects>(conn(), schema_);
  }
  void TearDown() override { fault::arm(""); }

  void publish(int aggregates, int per_aggregate, int first_k = 0) {
    enqueue(aggregates, per_aggregate, false, first_k);
    Relay relay(options("r"), make_redis_sink(to_streams(prefix_)));
    ASSERT_TRUE(relay.run_until_idle(30s));
    ASSERT_EQ(unpublished(), 0);
  }
  RedisConsumerOptions consumer_options(const std::string& name, int batch = 10) {
    RedisConsumerOptions o;
    o.url = redis_server().url();
    o.streams = redis_streams(prefix_ + ":{aggregate_type}:{partition}", "order", 4);
    o.consumer = name;
    o.database_url = database_url();
    o.schema = schema_;
    o.batch = batch;
    o.retry_backoff_base = 10ms;
    o.retry_backoff_max = 50ms;
    return o;
  }
  long long poll_until(RedisInboxConsumer& consumer, long long want, std::chrono::seconds limit) {
    return effects_->poll_until([&] { consumer.poll(200ms); }, want, limit);
  }
  long long pending() {
    long long total = 0;
    Admin admin;
    for (const auto& stream :
         redis_streams(prefix_ + ":{aggregate_type}:{partition}", "order", 4)) {
      total += admin.run({"XPENDING", stream, "outbox"})->element[0]->integer;
    }
    return total;
  }

  std::string prefix_;
  std::unique_ptr<ConsumerEffects> effects_;
};

TEST_F(RedisTest, EventsARelayPublishedAreAppliedOnceEachInOrderAndAcknowledged) {
  RedisInboxConsumer consumer(consumer_options("a", 7), effects_->record());
  publish(6, 20);
  EXPECT_EQ(poll_until(consumer, 120, 30s), 120) << effects_->last_error();
  EXPECT_EQ(effects_->out_of_order(), 0);
  EXPECT_EQ(effects_->distinct(), 120);
  EXPECT_EQ(pending(), 0) << "every entry acknowledged";
  const auto stats = consumer.stats();
  EXPECT_EQ(stats.applied, 120U);
  EXPECT_EQ(stats.redis_streams_held, 4U);
}

TEST_F(RedisTest, AFailedBatchIsReadAgainFirstAndAppliedInOrder) {
  auto inner = effects_->record();
  int calls = 0;
  RedisInboxConsumer consumer(consumer_options("a", 10), [&](PGconn* c, const ConsumedEvent& e) {
    if (++calls == 5) throw std::runtime_error("the effect failed once");
    inner(c, e);
  });
  publish(3, 20);
  EXPECT_EQ(poll_until(consumer, 60, 30s), 60) << effects_->last_error();
  EXPECT_NE(effects_->last_error().find("failed once"), std::string::npos);
  EXPECT_EQ(effects_->out_of_order(), 0);
  EXPECT_EQ(effects_->distinct(), 60);
  EXPECT_EQ(consumer.stats().failed_batches, 1U);
  EXPECT_GE(consumer.stats().redeliveries, 1U);
}

// Two consumers in one group: the first holds every stream's lock; it commits a batch and stops
// before the XACK, and polls no more (a process that died or hangs). After the lease the second
// takes the streams, claims what the first left pending (duplicates for the inbox) and goes on,
// each aggregate in order; the first, back, holds nothing and applies nothing.
TEST_F(RedisTest, ADeadConsumersStreamsAndPendingEntriesAreTakenOverInOrder) {
  RedisConsumerOptions first_options = consumer_options("first");
  first_options.lease = 1000ms;
  RedisConsumerOptions second_options = consumer_options("second");
  second_options.lease = 1000ms;
  RedisInboxConsumer first(first_options, effects_->record("first"));
  first.poll(50ms);  // takes the locks
  RedisInboxConsumer second(second_options, effects_->record("second"));
  EXPECT_EQ(second.poll(50ms), 0U);
  EXPECT_EQ(second.stats().redis_streams_held, 0U);
  publish(5, 20);
  while (effects_->all() < 30) first.poll(200ms);
  fault::arm(std::string(fault::kConsumerAfterCommitBeforeOffset) + "=error@1");
  EXPECT_ANY_THROW(first.poll(2000ms));
  fault::arm("");
  EXPECT_GT(pending(), 0) << "committed and not acknowledged";
  const long long by_first = effects_->all();
  EXPECT_EQ(poll_until(second, 100, 30s), 100) << effects_->last_error();
  EXPECT_EQ(effects_->distinct(), 100);
  EXPECT_EQ(effects_->out_of_order(), 0);
  EXPECT_EQ(effects_->by("second"), 100 - by_first);
  EXPECT_GE(second.stats().redis_claimed, 1U);
  EXPECT_GE(second.stats().duplicates, 1U) << "the batch committed and not acknowledged";
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(first.poll(100ms), 0U);
  EXPECT_EQ(first.stats().redis_streams_held, 0U);
}

// A process whose lock lapsed on the server (it was paused past the lease; here the locks are
// deleted behind its back) must take nothing: what it took would sit in its pending list while
// the stream's new holder applies what follows.
TEST_F(RedisTest, AConsumerWhoseLockLapsedTakesNothingFromTheStream) {
  RedisInboxConsumer first(consumer_options("first"), effects_->record("first"));
  first.poll(50ms);
  ASSERT_EQ(first.stats().redis_streams_held, 4U);
  Admin admin;
  for (const auto& stream : redis_streams(prefix_ + ":{aggregate_type}:{partition}", "order", 4)) {
    admin.run({"DEL", stream + ":outbox-lock:outbox"});
  }
  RedisInboxConsumer second(consumer_options("second"), effects_->record("second"));
  second.poll(50ms);
  EXPECT_EQ(second.stats().redis_streams_held, 4U);
  publish(3, 10);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(first.poll(20ms), 0U) << "read past its lock";
  EXPECT_EQ(poll_until(second, 30, 30s), 30) << effects_->last_error();
  EXPECT_EQ(effects_->by("first"), 0);
  EXPECT_EQ(effects_->out_of_order(), 0);
  EXPECT_EQ(pending(), 0);
}

// Two live processes with one consumer name (replicas of one configuration) are still two lock
// holders: one reads, the other waits.
TEST_F(RedisTest, TwoProcessesWithOneConsumerNameDoNotBothRead) {
  RedisInboxConsumer one(consumer_options("twin"), effects_->record("one"));
  RedisInboxConsumer two(consumer_options("twin"), effects_->record("two"));
  one.poll(50ms);
  two.poll(50ms);
  EXPECT_EQ(one.stats().redis_streams_held, 4U);
  EXPECT_EQ(two.stats().redis_streams_held, 0U);
}

// A server at maxmemory (noeviction) refuses appends; a consumer must still start, take its
// streams, read and acknowledge, which is what frees memory.
TEST_F(RedisTest, AConsumerStartsAndAppliesOnAServerAtMaxmemory) {
  {
    RedisInboxConsumer creator(consumer_options("creator"), effects_->record("creator"));
    creator.poll(10ms);  // the group, before anything is published; its locks go with it
  }
  publish(2, 5);
  Admin admin;
  admin.run({"CONFIG", "SET", "maxmemory", "1"});
  admin.run({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  RedisInboxConsumer consumer(consumer_options("late"), effects_->record("late"));
  const long long applied = poll_until(consumer, 10, 20s);
  admin.run({"CONFIG", "SET", "maxmemory", "0"});
  EXPECT_EQ(applied, 10) << effects_->last_error();
  EXPECT_EQ(pending(), 0);
}

TEST_F(RedisTest, TheAuditReadsTheStreamsByRangeWithoutTakingAnything) {
  publish(2, 5);
  RedisAuditOptions audit;
  audit.url = redis_server().url();
  audit.stream_template = prefix_ + ":{aggregate_type}:{partition}";
  audit.database_url = database_url();
  audit.schema = schema_;
  audit.since = "2000-01-01T00:00:00Z";
  AuditReport report = audit_redis_streams(audit);
  EXPECT_EQ(report.rows, 10);
  EXPECT_EQ(report.published, 10);
  EXPECT_EQ(report.messages, 10);
  EXPECT_TRUE(report.lost.empty());
  // A row marked published that never reached a stream is lost, and the audit says so.
  enqueue(1, 1, false, 100);
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET published_at = now() WHERE published_at IS NULL");
  report = audit_redis_streams(audit);
  EXPECT_EQ(report.messages, 10) << "read again: nothing was taken";
  EXPECT_EQ(report.lost.size(), 1U);
}

}  // namespace
}  // namespace outbox::testing
