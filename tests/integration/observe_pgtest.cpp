// What a relay and a consumer serve over HTTP (ObserveServer): counters by aggregate type, the
// backlog gauges from the table, health probes, the token beyond loopback, and that what they
// serve passes promtool and names every metric the dashboard and the alerts use.

#include <httplib.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "outbox/error.hpp"
#include "outbox/kafka_consumer.hpp"
#include "outbox/observe.hpp"
#include "outbox/redis_sink.hpp"
#include "outbox/status.hpp"
#include "support/relay_fixture.hpp"
#include "unit/contains.hpp"

namespace outbox::testing {
namespace {

class ObserveTest : public RelayFixture {
 protected:
  ObserveOptions observe_options() {
    ObserveOptions o;
    o.listen = "127.0.0.1:0";
    o.database_url = database_url();
    o.schema = schema_;
    o.backlog_refresh = std::chrono::milliseconds(100);
    return o;
  }

  static httplib::Result get(const ObserveServer& server, const std::string& path,
                             const std::string& token = {}) {
    httplib::Client client("127.0.0.1", server.port());
    client.set_read_timeout(10, 0);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return client.Get(path, headers);
  }

  static std::string scrape(const ObserveServer& server) {
    const auto response = get(server, "/metrics");
    EXPECT_TRUE(response) << "no answer from /metrics";
    if (!response) return {};
    EXPECT_EQ(response->status, 200);
    return response->body;
  }

  // The value of the series `series` (name and labels as served) in `text`; fails the test
  // and returns NaN when it is absent (so no comparison passes by accident).
  static double value(const std::string& text, const std::string& series) {
    const auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) {
      ADD_FAILURE() << series << " is not served";
      return std::nan("");
    }
    return std::stod(text.substr(at + series.size() + 2));
  }
  static bool served(const std::string& text, const std::string& series) {
    return text.find("\n" + series + " ") != std::string::npos;
  }
  // Waits for a backlog run that began after every change so far (not a fixed sleep: the
  // query's next run is stretched to ten times its duration, and under ASan on a busy machine
  // that outlasts any sleep short enough to keep the suite quick).
  static void let_the_backlog_refresh(ObserveServer& server) {
    ASSERT_TRUE(server.refresh_backlog(30s)) << "no backlog run within 30 s";
  }

  // A pending row as the producer (or the quarantine) leaves it. Intervals are PostgreSQL's
  // text ("1 hour", "-1 minute"); a quarantined row waits until 'infinity'.
  struct Row {
    std::string type{};
    std::string id{};  // empty: a fresh aggregate
    int sequence = 1;
    std::string occurred_ago = "0 s";
    std::string available_in = "0 s";  // after now; negative: due since
    bool quarantined = false;
  };
  void insert(const Row& row) {
    const std::string sequence = std::to_string(row.sequence);
    pg::exec(conn(),
             "INSERT INTO " + schema_.table("outbox_events") +
                 " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, "
                 "payload, occurred_at, available_at, quarantined_at) VALUES (gen_random_uuid(), "
                 "$1, coalesce(nullif($2, ''), gen_random_uuid()::text), $3, 'Step', '{}', "
                 "now() - $4::interval, "
                 "CASE WHEN $6 THEN 'infinity' ELSE now() + $5::interval END, "
                 "CASE WHEN $6 THEN now() END)",
             {row.type.c_str(), row.id.c_str(), sequence.c_str(), row.occurred_ago.c_str(),
              row.available_in.c_str(), row.quarantined ? "true" : "false"});
  }
  // A pending row of a fresh aggregate of `type`, written and due `age` ago.
  void insert_pending(const std::string& type, const std::string& age, bool quarantined) {
    insert(
        {.type = type, .occurred_ago = age, .available_in = "-" + age, .quarantined = quarantined});
  }
};

TEST_F(ObserveTest, ARelayServesItsCountsByAggregateTypeAndTheBacklogFromTheTable) {
  Relay relay(options("observed"), sink());
  ObserveServer server(observe_options());
  server.watch_relay(relay);
  server.start();
  ASSERT_GT(server.port(), 0);

  // Not running yet: alive, not ready.
  EXPECT_EQ(get(server, "/healthz")->status, 200);
  const auto not_ready = get(server, "/readyz");
  EXPECT_EQ(not_ready->status, 503);
  EXPECT_TRUE(contains(not_ready->body, "starting"));

  enqueue(5, 4);  // 20 "order" events
  insert_pending("payment", "1 hour", false);
  insert_pending("payment", "1 second", true);
  let_the_backlog_refresh(server);
  std::string text = scrape(server);
  EXPECT_EQ(value(text, "outbox_backlog_query_up"), 1);
  EXPECT_EQ(value(text, R"(outbox_pending_events{aggregate_type="order"})"), 20);
  EXPECT_EQ(value(text, R"(outbox_pending_events{aggregate_type="payment"})"), 1);
  EXPECT_EQ(value(text, R"(outbox_quarantined_events{aggregate_type="payment"})"), 1);
  EXPECT_GE(value(text, R"(outbox_oldest_pending_age_seconds{aggregate_type="payment"})"), 3600);
  const double order_age =
      value(text, R"(outbox_oldest_pending_age_seconds{aggregate_type="order"})");
  EXPECT_GE(order_age, 0);
  EXPECT_LT(order_age, 600);

  ASSERT_TRUE(relay.run_until_idle(30s));
  let_the_backlog_refresh(server);
  text = scrape(server);
  EXPECT_EQ(value(text, R"(outbox_relay_events_published_total{aggregate_type="order"})"), 20);
  EXPECT_EQ(value(text, R"(outbox_relay_events_published_total{aggregate_type="payment"})"), 1);
  EXPECT_EQ(value(text, "outbox_relay_events_claimed_total"), 21);
  EXPECT_EQ(value(text, "outbox_relay_commit_to_ack_seconds_count"), 21);
  EXPECT_EQ(value(text, "outbox_relay_send_to_ack_seconds_count"), 21);
  // The hour-old payment event is in the last finite bucket's cumulative count only from 300 s.
  EXPECT_EQ(value(text, R"(outbox_relay_commit_to_ack_seconds_bucket{le="300"})"), 20);
  EXPECT_GE(value(text, "outbox_relay_claim_batch_events_count"), 1);
  // Published: pending 0 (a type seen before reads 0, not absent).
  EXPECT_EQ(value(text, R"(outbox_pending_events{aggregate_type="order"})"), 0);
  EXPECT_EQ(value(text, R"(outbox_pending_events{aggregate_type="payment"})"), 0);
  EXPECT_EQ(value(text, R"(outbox_quarantined_events{aggregate_type="payment"})"), 1);
  EXPECT_EQ(value(text, "outbox_relay_leases_taken_over_total"), 0);
}

// One set of numbers: `outbox status` (read_status), the admin page (/api/overview) and /metrics
// say the same pending, quarantined, oldest age and relay states, from a fresh schema (0, not
// absent) to one with due, delayed, quarantined and blocked events and a stalled relay.
TEST_F(ObserveTest, StatusThePageAndTheMetricsAgree) {
  ObserveServer server(observe_options());
  server.start();
  let_the_backlog_refresh(server);
  std::string text = scrape(server);
  EXPECT_EQ(value(text, "outbox_pending_events"), 0) << "a fresh install serves 0, not nothing";
  EXPECT_EQ(value(text, "outbox_quarantined_events"), 0);
  EXPECT_EQ(value(text, "outbox_oldest_pending_age_seconds"), 0);
  EXPECT_EQ(value(text, R"(outbox_relay_sessions{state="silent"})"), 0);
  EXPECT_EQ(value(text, R"(outbox_relay_sessions{state="working"})"), 0);

  insert({.type = "order", .id = "o", .occurred_ago = "1 h", .available_in = "-1 h"});
  insert({.type = "order", .id = "o", .sequence = 2, .occurred_ago = "1 h"});
  insert({.type = "pay", .id = "q", .occurred_ago = "2 h", .quarantined = true});
  insert({.type = "pay", .id = "q", .sequence = 2, .occurred_ago = "2 h"});
  insert({.type = "later", .id = "l", .occurred_ago = "3 h", .available_in = "1 h"});
  // A relay that stopped without ending its session (SIGSTOP: the row is not refreshed, the
  // lock still held) and one at work.
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_relays") +
                       " (relay_id, lock_key, backend_pid, listening, seen_at) VALUES"
                       " ('stopped', 7, 7, false, now() - interval '2 minutes'),"
                       " ('busy', 8, 8, false, now())");
  let_the_backlog_refresh(server);
  text = scrape(server);
  const OutboxStatus status = read_status(conn(), schema_);
  const auto response = get(server, "/api/overview");
  ASSERT_TRUE(response);
  const nlohmann::json page = nlohmann::json::parse(response->body);

  double page_pending = 0, page_quarantined = 0, page_oldest = 0;
  for (const auto& row : page.at("backlog")) {
    page_pending += row.at("pending").get<double>();
    page_quarantined += row.at("quarantined").get<double>();
    page_oldest = std::max(page_oldest, row.at("oldest_pending_age").get<double>());
  }
  const double metric_pending = value(text, R"(outbox_pending_events{aggregate_type="order"})") +
                                value(text, R"(outbox_pending_events{aggregate_type="pay"})") +
                                value(text, R"(outbox_pending_events{aggregate_type="later"})");
  const double metric_quarantined =
      value(text, R"(outbox_quarantined_events{aggregate_type="pay"})");
  const double metric_oldest =
      value(text, R"(outbox_oldest_pending_age_seconds{aggregate_type="order"})");
  EXPECT_FALSE(served(text, "outbox_pending_events")) << "the unlabelled 0 only before any type";
  // o's two, q's successor (blocked behind its quarantined head), l's delayed one.
  EXPECT_EQ(status.pending, 4);
  EXPECT_EQ(metric_pending, 4);
  EXPECT_EQ(page_pending, 4);
  EXPECT_EQ(status.quarantined, 1);
  EXPECT_EQ(metric_quarantined, 1);
  EXPECT_EQ(page_quarantined, 1);
  // The due head of o, an hour; not q's two hours (quarantined), not l's three (not due).
  for (const double age : {status.oldest_pending_seconds, metric_oldest, page_oldest}) {
    EXPECT_GE(age, 3600);
    EXPECT_LT(age, 3700);
  }

  int status_silent = 0;
  for (const RelaySessionStatus& relay : status.relays) status_silent += relay.state() == "silent";
  int page_silent = 0;
  for (const auto& part : page.at("parts")) page_silent += part.at("state") == "silent";
  EXPECT_EQ(status_silent, 1);
  EXPECT_EQ(page_silent, 1) << page.at("parts").dump();
  EXPECT_EQ(value(text, R"(outbox_relay_sessions{state="silent"})"), 1);
  EXPECT_EQ(value(text, R"(outbox_relay_sessions{state="working"})"), 1);
  EXPECT_EQ(value(text, R"(outbox_relay_sessions{state="waiting"})"), 0);
}

// The admin page's last hour is the server's: a relay's session row says what it published and
// its health (migration 17), and the history turns the growth into a rate; the headline reads it.
TEST_F(ObserveTest, TheHistoryCountsWhatTheRelaySessionsSayTheyPublished) {
  ObserveServer server(observe_options());
  server.start();
  let_the_backlog_refresh(server);  // the first sample: where counting starts
  enqueue(5, 4);
  Relay relay(options("history"), sink());
  std::thread running([&] { relay.run(); });
  // Written with each heartbeat and when the relay turns to listening, idle.
  const std::string query = "SELECT published::text || ' ' || coalesce(health, '') FROM " +
                            schema_.table("outbox_relays");
  std::string said;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (said != "20 running" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    const auto row = pg::exec(conn(), query);
    said = row.rows() == 1 ? std::string(row.text(0, 0)) : "";
  }
  EXPECT_EQ(said, "20 running") << "the session's row says what it published, and its health";
  // A sample at most every 5 s (History::kStep).
  std::this_thread::sleep_for(std::chrono::milliseconds(5100));
  let_the_backlog_refresh(server);
  const auto response = get(server, "/api/overview");
  ASSERT_TRUE(response);
  const nlohmann::json overview = nlohmann::json::parse(response->body);
  const nlohmann::json& history = overview.at("history");
  const auto& t = history.at("t");
  const auto& rate = history.at("published_per_second");
  ASSERT_GE(t.size(), 2U) << history.dump();
  EXPECT_EQ(history.at("published_total").front(), 0) << "where counting starts";
  EXPECT_EQ(history.at("published_total").back(), 20) << history.dump();
  // The rate waits for half a minute of history (History::kMinRateSpan; its arithmetic is the
  // unit tests'): not said yet, rather than said wrong.
  EXPECT_TRUE(rate.back().is_null()) << history.dump();
  EXPECT_EQ(history.at("pending").back(), 0);
  EXPECT_EQ(overview.at("verdict").at("state"), "healthy") << overview.at("verdict").dump();
  relay.request_stop();
  running.join();
}

// A delayed event (deliver_after) is not late before its time, nor is the event waiting behind
// it; once due, its age counts from then, not from its transaction.
TEST_F(ObserveTest, TheOldestPendingAgeCountsDelayedEventsFromTheirTime) {
  // A head written an hour ago to go in an hour, and its successor written an hour ago.
  insert({.type = "later", .id = "a", .occurred_ago = "1 h", .available_in = "1 h"});
  insert(
      {.type = "later", .id = "a", .sequence = 2, .occurred_ago = "1 h", .available_in = "-1 h"});
  // Delayed by 59 minutes, so due a minute ago.
  insert({.type = "due", .id = "b", .occurred_ago = "1 h", .available_in = "-1 minute"});
  ObserveServer server(observe_options());
  server.start();
  let_the_backlog_refresh(server);
  const std::string text = scrape(server);
  EXPECT_EQ(value(text, R"(outbox_pending_events{aggregate_type="later"})"), 2);
  EXPECT_EQ(value(text, R"(outbox_oldest_pending_age_seconds{aggregate_type="later"})"), 0);
  const double due = value(text, R"(outbox_oldest_pending_age_seconds{aggregate_type="due"})");
  EXPECT_GE(due, 59);
  EXPECT_LT(due, 600);
}

// The admin page's slowest aggregates come from the backlog thread's query: the heads that have
// waited longest, never a quarantined one (the quarantine table lists those) nor one delayed and
// not yet due; each with its pending rows. The query's duration is served.
TEST_F(ObserveTest, TheSlowestAggregatesAreTheHeadsThatWaitedLongest) {
  // Delayed, not due: not waiting, however old.
  insert({.type = "later", .id = "a", .occurred_ago = "3 h", .available_in = "1 h"});
  // Quarantined two hours ago, with two events behind it.
  insert({.type = "pay", .id = "q", .occurred_ago = "2 h", .quarantined = true});
  insert({.type = "pay", .id = "q", .sequence = 2, .occurred_ago = "2 h"});
  insert({.type = "pay", .id = "q", .sequence = 3, .occurred_ago = "1 h"});
  // Due for an hour.
  insert({.type = "order", .id = "o", .occurred_ago = "1 h", .available_in = "-1 h"});
  enqueue(3, 1);  // three fresh "order" aggregates
  ObserveServer server(observe_options());
  server.start();
  let_the_backlog_refresh(server);
  const auto response = get(server, "/api/overview");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200) << response->body;
  const nlohmann::json slowest = nlohmann::json::parse(response->body).at("slowest");
  // The hour-old due head first, then the three fresh ones; the quarantined head is the
  // quarantine table's, the delayed one is not waiting.
  ASSERT_EQ(slowest.size(), 4U) << slowest.dump();
  EXPECT_EQ(slowest[0].at("aggregate_id"), "o");
  EXPECT_EQ(slowest[0].at("pending"), 1);
  EXPECT_GE(slowest[0].at("waiting_age").get<double>(), 3600);
  EXPECT_LT(slowest[0].at("waiting_age").get<double>(), 7200);
  EXPECT_LT(slowest[1].at("waiting_age").get<double>(), 600);
  for (const auto& a : slowest) {
    EXPECT_NE(a.at("aggregate_id"), "a") << slowest.dump();
    EXPECT_NE(a.at("aggregate_id"), "q") << slowest.dump();
  }
  const double took = value(scrape(server), "outbox_backlog_query_duration_seconds");
  EXPECT_GT(took, 0);
  EXPECT_LT(took, 30);
}

// refresh_backlog() runs the query at once, not after --backlog-refresh, and what it serves
// then includes what was committed before the call.
TEST_F(ObserveTest, ARefreshAskedForRunsAtOnceAndSeesEarlierCommits) {
  ObserveOptions hourly = observe_options();
  hourly.backlog_refresh = std::chrono::hours(1);
  ObserveServer server(hourly);
  server.start();
  let_the_backlog_refresh(server);
  EXPECT_FALSE(served(scrape(server), R"(outbox_pending_events{aggregate_type="late"})"));
  insert_pending("late", "1 minute", false);
  const auto began = std::chrono::steady_clock::now();
  let_the_backlog_refresh(server);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 20s);
  EXPECT_EQ(value(scrape(server), R"(outbox_pending_events{aggregate_type="late"})"), 1);
  server.stop();
  EXPECT_FALSE(server.refresh_backlog(100ms)) << "stopped";
}

// A backlog query stuck behind a lock (or a cut network) must not hold a shutdown for its 30 s
// timeout: stop() cancels it.
TEST_F(ObserveTest, StoppingCancelsABacklogQueryInProgress) {
  pg::Connection locker = pg::Connection::open(database_url(), "test-locker");
  pg::exec(locker.get(), "BEGIN");
  pg::exec(locker.get(),
           "LOCK TABLE " + schema_.table("outbox_events") + " IN ACCESS EXCLUSIVE MODE");
  ObserveServer server(observe_options());
  server.start();
  // Wait until the backlog query is waiting for the lock.
  bool waiting = false;
  for (int i = 0; i < 100 && !waiting; ++i) {
    std::this_thread::sleep_for(50ms);
    waiting = pg::exec(conn(),
                       "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                       "'outbox-metrics' AND wait_event_type = 'Lock'")
                  .int64(0, 0) > 0;
  }
  ASSERT_TRUE(waiting) << "the backlog query never waited for the lock";
  const auto began = std::chrono::steady_clock::now();
  server.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - began, 10s);
  pg::exec(locker.get(), "ROLLBACK");
}

TEST_F(ObserveTest, LeasesOfADeadRelayTakenOverAreCounted) {
  enqueue(3, 1);
  // As a relay that claimed them and died leaves them: leased, the lease run out.
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") +
                       " SET claimed_by = 'dead-relay:1', claim_until = now() - interval '1 s'");
  enqueue(2, 1);  // two more, never claimed
  Relay relay(options("heir"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));
  EXPECT_EQ(relay.stats().leases_taken_over, 3u);
  EXPECT_EQ(relay.stats().published, 5u);
}

TEST_F(ObserveTest, BeyondLoopbackATokenIsRequiredAndChecked) {
  ObserveOptions open = observe_options();
  open.listen = "0.0.0.0:0";
  EXPECT_THROW(ObserveServer{open}, ConfigError);
  open.token = "short";
  EXPECT_THROW(ObserveServer{open}, ConfigError);
  open.token = "0123456789abcdef0123456789abcdef";
  ObserveServer server(open);
  server.start();
  EXPECT_EQ(get(server, "/metrics")->status, 401);
  EXPECT_EQ(get(server, "/metrics", "0123456789abcdef0123456789abcdeX")->status, 401);
  const auto scraped = get(server, "/metrics", open.token);
  EXPECT_EQ(scraped->status, 200);
  EXPECT_TRUE(contains(scraped->body, "outbox_build_info"));
  // Probes need no token, and then say no more than ok.
  let_the_backlog_refresh(server);
  const auto ready = get(server, "/readyz");
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ok\n");
}

TEST_F(ObserveTest, AnAddressInUseIsRefusedNotShared) {
  ObserveServer first(observe_options());
  first.start();
  ObserveOptions same = observe_options();
  same.listen = "127.0.0.1:" + std::to_string(first.port());
  ObserveServer second(same);
  EXPECT_THROW(second.start(), ConfigError);
}

TEST_F(ObserveTest, WithoutTheDatabaseTheBacklogIsAbsentAndAdminIsNotReady) {
  ObserveOptions options = observe_options();
  options.database_url = "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=1";
  ObserveServer server(options);
  server.start();
  let_the_backlog_refresh(server);
  const std::string text = scrape(server);
  EXPECT_EQ(text.find("outbox_pending_events"), std::string::npos);
  EXPECT_EQ(value(text, "outbox_backlog_query_up"), 0);
  const auto ready = get(server, "/readyz");
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(get(server, "/healthz")->status, 200);
}

// The relay's, the consumer's and outbox admin's /metrics, as Prometheus's own checker reads
// them; then every metric the dashboard and the alerts name must be among them
// (tests/cli/ops_files.sh).
TEST_F(ObserveTest, WhatIsServedPassesPromtoolAndCoversTheDashboardAndTheAlerts) {
  kafka().create_topic(topic_, 2, 1);
  enqueue(4, 5);
  Relay relay(options("served"), sink());
  ASSERT_TRUE(relay.run_until_idle(30s));

  KafkaConsumerOptions consumer_options;
  consumer_options.brokers = kafka().bootstrap_servers();
  consumer_options.group_id = "observe-" + schema_.name();
  consumer_options.topics = {topic_};
  consumer_options.database_url = database_url();
  consumer_options.schema = schema_;
  consumer_options.consumer_name = "projection";
  int effects = 0;
  KafkaInboxConsumer consumer(consumer_options, [&](PGconn*, const ConsumedEvent&) { ++effects; });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (consumer.stats().applied < 20 && std::chrono::steady_clock::now() < deadline) {
    consumer.poll(100ms);
  }
  ASSERT_EQ(consumer.stats().applied, 20u);
  std::this_thread::sleep_for(1100ms);  // the lag is measured at most once a second
  consumer.poll(100ms);
  EXPECT_EQ(consumer.stats().lag_messages, 0);

  ObserveOptions relay_side = observe_options();
  ObserveServer relay_server(relay_side);
  relay_server.watch_relay(relay);
  relay_server.start();
  ObserveOptions consumer_side = observe_options();
  consumer_side.backlog = false;
  ObserveServer consumer_server(consumer_side);
  consumer_server.watch_consumer("projection", consumer);
  consumer_server.start();
  EXPECT_FALSE(consumer_server.refresh_backlog(100ms)) << "it has no backlog to refresh";
  insert_pending("order", "2 minutes", true);  // a quarantined series for the admin's text
  ObserveServer admin(observe_options());
  admin.start();
  let_the_backlog_refresh(admin);
  let_the_backlog_refresh(relay_server);

  // A change-data-capture relay serves the slot's gauges once its stream measured them.
  RelayOptions cdc = options("streaming");
  cdc.source = RelaySource::cdc;
  cdc.cdc.slot = "obs_" + schema_.name().substr(0, 50);
  Relay cdc_relay(cdc, sink());
  std::thread streaming([&] { cdc_relay.run(); });
  const auto slot_deadline = std::chrono::steady_clock::now() + 30s;
  while (cdc_relay.stats().slot_lag_ms < 0 && std::chrono::steady_clock::now() < slot_deadline) {
    enqueue(1, 1, false, 100);  // a commit for the stream to be caught up with
    std::this_thread::sleep_for(200ms);
  }
  ObserveOptions cdc_side = observe_options();
  cdc_side.backlog = false;
  ObserveServer cdc_server(cdc_side);
  cdc_server.watch_relay(cdc_relay);
  cdc_server.start();
  const std::string cdc_text = scrape(cdc_server);
  cdc_server.stop();
  cdc_relay.request_stop();
  streaming.join();
  // outbox admin reports the slot its relay left: not streamed, the WAL it holds.
  let_the_backlog_refresh(admin);
  const std::string admin_text = scrape(admin);
  const std::string database = pg::exec(conn(), "SELECT current_database()").text(0, 0).data();
  const std::string slot_label = "{database=\"" + database + "\",slot=\"" + cdc.cdc.slot + "\"}";
  EXPECT_EQ(value(admin_text, "outbox_replication_slot_streamed" + slot_label), 0);
  EXPECT_GE(value(admin_text, "outbox_replication_slot_retained_bytes" + slot_label), 0);
  const auto overview = get(admin, "/api/overview");
  ASSERT_TRUE(overview);
  bool listed = false;
  const nlohmann::json listing = nlohmann::json::parse(overview->body);
  for (const auto& slot : listing.at("slots")) {
    if (slot.at("name") == cdc.cdc.slot) listed = !slot.at("streamed").get<bool>();
  }
  EXPECT_TRUE(listed) << "the admin page lists the slot as not streamed: " << overview->body;
  pg::exec(conn(), "SELECT pg_drop_replication_slot($1)", {cdc.cdc.slot.c_str()});
  EXPECT_GE(value(cdc_text, "outbox_relay_slot_lag_bytes"), 0);
  EXPECT_GE(value(cdc_text, "outbox_relay_slot_lag_seconds"), 0);

  const std::string consumer_text = scrape(consumer_server);
  EXPECT_EQ(value(consumer_text, R"(outbox_consumer_events_applied_total{consumer="projection"})"),
            20);
  EXPECT_EQ(value(consumer_text, R"(outbox_consumer_lag_messages{consumer="projection"})"), 0);
  EXPECT_EQ(consumer_text.find("outbox_pending_events"), std::string::npos);

  // A relay with the Redis sink serves that sink's statistics, which an alert uses
  // (OutboxRedisTrimHeldBack): never run, so its sink never connects.
  RedisSinkOptions redis;
  redis.url = "redis://127.0.0.1:1";
  Relay redis_relay(options("redis"), make_redis_sink(redis));
  ObserveOptions redis_side = observe_options();
  redis_side.backlog = false;
  ObserveServer redis_server(redis_side);
  redis_server.watch_relay(redis_relay);
  redis_server.start();
  const std::string redis_text = scrape(redis_server);
  EXPECT_EQ(value(redis_text, "outbox_relay_redis_trim_held_back_seconds"), 0);

  const std::string dir = ::testing::TempDir();
  std::vector<std::string> files;
  for (const auto& [name, text] :
       {std::pair{"relay", scrape(relay_server)}, std::pair{"consumer", consumer_text},
        std::pair{"admin", admin_text}, std::pair{"cdc-relay", cdc_text},
        std::pair{"redis-relay", redis_text}}) {
    const std::string file = dir + "observe-" + schema_.name() + "-" + name + ".txt";
    std::ofstream(file) << text;
    files.push_back(file);
    const std::string check = "promtool check metrics < " + file;
    EXPECT_EQ(std::system(check.c_str()), 0) << check;
  }
  std::string ops = "bash " OUTBOX_SOURCE_DIR "/tests/cli/ops_files.sh " OUTBOX_SOURCE_DIR;
  for (const std::string& file : files) ops += " " + file;
  EXPECT_EQ(std::system(ops.c_str()), 0) << ops;
}

}  // namespace
}  // namespace outbox::testing
