// A relay that dies with rows claimed: another relay takes them over once the dead relay's
// PostgreSQL session is gone (its advisory lock, migration 8), not after the whole lease. Every
// relay here has a 60 s lease, so a test that passes within seconds went through the takeover.

#include <gtest/gtest.h>

#include <thread>

#include "outbox/relay.hpp"
#include "support/relay_fixture.hpp"
#include "support/test_env.hpp"
#include "support/test_sinks.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kLongLease = 60s;

// A login role of its own for one relay, so a test can cut that relay off from PostgreSQL (no
// more logins, its backend terminated: a dead process or a network partition, as the server
// sees it) and let it back. Not a superuser, as relays usually are not.
class RelayRole {
 public:
  static constexpr const char* kPassword = "takeover-test";
  // `admin` is the fixture's connection, read at each use: a test that restarts PostgreSQL
  // replaces it (a PGconn* kept from before pointed at a freed connection: ASan saw libpq write
  // into it from ~RelayRole).
  RelayRole(pg::Connection& admin, const SchemaName& schema, std::string name)
      : admin_(admin), name_(std::move(name)) {
    pg::exec(admin_.get(), "DO $$ BEGIN CREATE ROLE " + name_ +
                               " LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
    // The embedded cluster asks every role for a password (scram-sha-256).
    pg::exec(admin_.get(), "ALTER ROLE " + name_ + " LOGIN PASSWORD '" + kPassword + "'");
    pg::exec(admin_.get(), "GRANT USAGE ON SCHEMA " + schema.quoted() + " TO " + name_);
    pg::exec(admin_.get(), "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " +
                               schema.quoted() + " TO " + name_);
  }
  ~RelayRole() {
    try {
      let_back();
    } catch (const std::exception&) {
    }
  }
  RelayRole(const RelayRole&) = delete;
  RelayRole& operator=(const RelayRole&) = delete;

  [[nodiscard]] std::string url() const {
    return database_url() + " user=" + name_ + " password=" + kPassword;
  }
  // Ends every session of the role and refuses new ones.
  void cut_off() {
    pg::exec(admin_.get(), "ALTER ROLE " + name_ + " NOLOGIN");
    pg::exec(admin_.get(),
             "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
             {name_.c_str()});
    const bool gone = wait_until(
        [&] {
          return count(admin_.get(), "SELECT count(*) FROM pg_stat_activity WHERE usename = $1",
                       {name_.c_str()}) == 0;
        },
        5s);
    ASSERT_TRUE(gone) << name_ << "'s sessions outlived pg_terminate_backend";
  }
  void let_back() { pg::exec(admin_.get(), "ALTER ROLE " + name_ + " LOGIN"); }

 private:
  pg::Connection& admin_;
  std::string name_;
};

class RelayTakeoverTest : public RelayFixture {
 protected:
  RelayOptions relay_options(const std::string& id, const RelayRole& role) {
    RelayOptions o = options(id);
    o.database_url = role.url();
    o.lease = kLongLease;
    o.drain_timeout = 100ms;
    return o;
  }
  long long claimed_by(const std::string& relay_id) {
    return count(conn(),
                 "SELECT count(*) FROM " + schema_.table("outbox_events") +
                     " WHERE published_at IS NULL AND claimed_by LIKE $1",
                 {(relay_id + ":%").c_str()});
  }
  std::string relays() { return schema_.table("outbox_relays"); }
};

// A relay holding ten claims is cut off for good (its process is gone, as far as PostgreSQL can
// tell). Another relay publishes the ten within a few seconds, far below the 60 s lease.
TEST_F(RelayTakeoverTest, ADeadRelaysClaimsAreTakenOverLongBeforeTheirLeaseEnds) {
  const auto ids = enqueue(10, 1);
  RelayRole victim_role(connection_, schema_, "takeover_victim");
  RelayRole survivor_role(connection_, schema_, "takeover_survivor");
  auto victim_options = relay_options("victim", victim_role);
  victim_options.reconnect_backoff_base = 50ms;
  victim_options.reconnect_backoff_max = 100ms;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay victim(victim_options, std::move(holding));
  std::thread victim_runner([&] { victim.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 10; }, 20s)) << held.held();
  ASSERT_EQ(claimed_by("victim"), 10);

  victim_role.cut_off();  // from here on it keeps trying to reconnect, in vain
  const auto died = std::chrono::steady_clock::now();
  Relay survivor(relay_options("survivor", survivor_role), sink());
  std::thread survivor_runner([&] { survivor.run(); });
  const bool taken_over = wait_until([&] { return unpublished() == 0; }, 10s);
  const auto took = std::chrono::steady_clock::now() - died;
  const bool row_ended =
      count(conn(), "SELECT count(*) FROM " + relays() +
                        " WHERE relay_id LIKE 'victim:%' AND ended_at IS NOT NULL"
                        " AND seen_at = '-infinity'") == 1;
  survivor.request_stop();
  victim.request_stop();
  survivor_runner.join();
  victim_runner.join();

  ASSERT_TRUE(taken_over) << unpublished() << " of 10 still unpublished "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms after the victim died (lease: 60 s)";
  EXPECT_EQ(survivor.stats().published, 10U);
  EXPECT_EQ(survivor.stats().fenced, 0U);
  EXPECT_TRUE(row_ended) << "the dead session's row should be marked ended, out of the producers' "
                            "count (seen_at -infinity)";
  std::cout << "taken over and published "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after the victim's session ended\n";
  expect_on_broker_in_order(ids);
}

// Any login sees a relay session's advisory-lock key in pg_locks and may queue for it. Once the
// relay dies, that waiter holds the key; a sweep that judged sessions by the key alone took the
// dead session for alive and its claims waited for the lease (29.4 s and 29.8 s with 30 s
// leases). A role that may only log in queues for the victim's key here, and the claims are
// still taken over within seconds of the victim's end.
TEST_F(RelayTakeoverTest, ALoginQueuedForTheLockKeyDoesNotKeepADeadRelayAlive) {
  const auto ids = enqueue(10, 1);
  RelayRole victim_role(connection_, schema_, "takeover_queued_victim");
  RelayRole survivor_role(connection_, schema_, "takeover_queued_survivor");
  pg::exec(conn(),
           "DO $$ BEGIN CREATE ROLE takeover_intruder LOGIN; EXCEPTION WHEN "
           "duplicate_object THEN NULL; END $$");
  pg::exec(conn(), std::string("ALTER ROLE takeover_intruder LOGIN PASSWORD '") +
                       RelayRole::kPassword + "'");
  auto victim_options = relay_options("queued-victim", victim_role);
  victim_options.reconnect_backoff_base = 50ms;
  victim_options.reconnect_backoff_max = 100ms;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay victim(victim_options, std::move(holding));
  std::thread victim_runner([&] { victim.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 10; }, 20s)) << held.held();

  // What the intruder can see with no privilege at all: pg_locks and who holds what.
  auto intruder = pg::Connection::open(database_url() +
                                       " user=takeover_intruder password=" + RelayRole::kPassword);
  const std::string key(pg::exec(intruder.get(),
                                 "SELECT ((l.classid::int8 << 32) | l.objid::int8)::text"
                                 " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                                 " WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted"
                                 " AND a.usename = 'takeover_queued_victim'")
                            .text(0, 0));
  ASSERT_EQ(PQsendQuery(intruder.get(), ("SELECT pg_advisory_lock(" + key + ")").c_str()), 1);
  ASSERT_TRUE(wait_until(
      [&] {
        return count(conn(),
                     "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a"
                     " ON a.pid = l.pid WHERE NOT l.granted AND l.locktype = 'advisory'"
                     " AND a.usename = 'takeover_intruder'") == 1;
      },
      5s));

  victim_role.cut_off();
  const auto died = std::chrono::steady_clock::now();
  const bool intruder_holds = wait_until(
      [&] {
        return count(conn(),
                     "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a"
                     " ON a.pid = l.pid WHERE l.granted AND l.locktype = 'advisory'"
                     " AND a.usename = 'takeover_intruder'") == 1;
      },
      5s);
  Relay survivor(relay_options("queued-survivor", survivor_role), sink());
  std::thread survivor_runner([&] { survivor.run(); });
  const bool taken_over = wait_until([&] { return unpublished() == 0; }, 10s);
  const auto took = std::chrono::steady_clock::now() - died;
  survivor.request_stop();
  victim.request_stop();
  survivor_runner.join();
  victim_runner.join();

  EXPECT_TRUE(intruder_holds)
      << "the intruder's queued lock should be granted once the victim died";
  ASSERT_TRUE(taken_over) << unpublished() << " of 10 still unpublished "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms after the victim died, its key held by another login";
  EXPECT_EQ(survivor.stats().published, 10U);
  std::cout << "taken over " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after the victim's session ended, its key held by another login\n";
  expect_on_broker_in_order(ids);
}

// A relay whose session ends but which reconnects within the grace (a network blip, an operator's
// pg_terminate_backend) keeps its claims: no other relay takes them, and its marks go through.
TEST_F(RelayTakeoverTest, ARelayThatReconnectsWithinTheGraceKeepsItsClaims) {
  enqueue(10, 1);
  RelayRole blip_role(connection_, schema_, "takeover_blip");
  RelayRole other_role(connection_, schema_, "takeover_other");
  auto blip_options = relay_options("blip", blip_role);
  blip_options.reconnect_backoff_base = 50ms;
  blip_options.reconnect_backoff_max = 100ms;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay blip(blip_options, std::move(holding));
  std::thread blip_runner([&] { blip.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 10; }, 20s)) << held.held();
  Relay other(relay_options("other", other_role), sink());
  std::thread other_runner([&] { other.run(); });
  ASSERT_TRUE(
      wait_until([&] { return count(conn(), "SELECT count(*) FROM " + relays()) == 2; }, 10s));

  blip_role.cut_off();
  // Let it back only once the other relay has seen its session end: from then on the grace runs.
  const bool seen_ended = wait_until(
      [&] {
        return count(conn(), "SELECT count(*) FROM " + relays() +
                                 " WHERE relay_id LIKE 'blip:%' AND ended_at IS NOT NULL") == 1;
      },
      5s);
  blip_role.let_back();
  const bool reconnected = wait_until([&] { return blip.stats().reconnects == 1; }, 5s);
  std::this_thread::sleep_for(3s);  // three times the grace, six looks by the other relay
  const long long still_blips = claimed_by("blip");
  const auto taken_by_other = other.stats().claimed;
  const long long rows = count(conn(), "SELECT count(*) FROM " + relays());
  held.release();
  const bool published = wait_until([&] { return unpublished() == 0; }, 10s);
  other.request_stop();
  blip.request_stop();
  other_runner.join();
  blip_runner.join();

  ASSERT_TRUE(seen_ended) << "the other relay should notice the ended session within a second";
  ASSERT_TRUE(reconnected);
  EXPECT_EQ(taken_by_other, 0U) << "claims of a relay back within the grace were taken over";
  EXPECT_EQ(still_blips, 10);
  EXPECT_EQ(rows, 3) << "the other relay, the blip's new session, and its old one retired";
  EXPECT_TRUE(published);
  EXPECT_EQ(blip.stats().published, 10U);
  EXPECT_EQ(blip.stats().fenced, 0U);
}

// What a relay no longer holds when it reconnects stays under its previous session: a mark the
// PostgreSQL crash undid (asynchronous commit), a claim whose answer the lost connection never
// brought. The reconnected relay moves what it does hold to its new session and retires the old
// one, so the rest is taken over once the old session counts as dead (the grace, 1 s), not after
// the lease (60 s). Before, the reconnected relay deleted the old session's row: a token whose
// session no row names was never found dead, and such a row blocked its aggregate for the whole
// lease (outbox_campaign paused-across-restart: the last event 12-23 s after the last commit).
TEST_F(RelayTakeoverTest, WhatAReconnectedRelayNoLongerHoldsIsTakenOverAfterTheGrace) {
  enqueue(11, 1);
  RelayRole blip_role(connection_, schema_, "takeover_orphan");
  RelayRole other_role(connection_, schema_, "takeover_orphan_other");
  auto blip_options = relay_options("blip", blip_role);
  blip_options.reconnect_backoff_base = 50ms;
  blip_options.reconnect_backoff_max = 100ms;
  blip_options.max_in_flight = 10;  // the eleventh row is left for the orphaned claim
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay blip(blip_options, std::move(holding));
  std::thread blip_runner([&] { blip.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 10; }, 20s)) << held.held();
  // The eleventh row, claimed under the blip's session by a claim the blip knows nothing of.
  const std::string events = schema_.table("outbox_events");
  pg::exec(conn(), "UPDATE " + events + " SET claimed_by = (SELECT relay_id FROM " + relays() +
                       " WHERE relay_id LIKE 'blip:%') || ':999999',"
                       " claim_until = now() + interval '60 seconds' WHERE claimed_by IS NULL");
  const std::string orphaned =
      "SELECT count(*) FROM " + events + " WHERE claimed_by LIKE '%:999999'";
  ASSERT_EQ(count(conn(), orphaned), 1);
  Relay other(relay_options("other", other_role), sink());
  std::thread other_runner([&] { other.run(); });

  blip_role.cut_off();
  blip_role.let_back();
  const bool reconnected = wait_until([&] { return blip.stats().reconnects == 1; }, 5s);
  const auto back = std::chrono::steady_clock::now();
  const bool orphan_taken = wait_until([&] { return count(conn(), orphaned) == 0; }, 8s);
  const auto took = std::chrono::steady_clock::now() - back;
  const long long blips = claimed_by("blip");
  const auto taken_by_other = other.stats().claimed;
  held.release();
  const bool published = wait_until([&] { return unpublished() == 0; }, 10s);
  other.request_stop();
  blip.request_stop();
  other_runner.join();
  blip_runner.join();

  ASSERT_TRUE(reconnected);
  ASSERT_TRUE(orphan_taken) << "a claim left under the blip's previous session waited for its "
                               "lease (60 s)";
  std::cout << "the claim left under the previous session was taken over "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after the reconnect\n";
  EXPECT_LE(taken_by_other, 1U) << "only the orphaned claim may go to the other relay";
  EXPECT_GE(blips, 10) << "the ten rows the blip holds moved with it to its new session";
  EXPECT_TRUE(published);
  EXPECT_EQ(blip.stats().fenced, 0U) << "its marks match the tokens of its new session";
}

// A relay cut off past the grace is taken for dead and its claims are taken over; when it comes
// back, its marks of those rows are fenced like any stale relay's, and the newer claims stand.
TEST_F(RelayTakeoverTest, ARelayCutOffPastTheGraceIsTakenOverAndItsLateMarksAreFenced) {
  const auto ids = enqueue(10, 1);
  RelayRole stale_role(connection_, schema_, "takeover_stale");
  RelayRole newer_role(connection_, schema_, "takeover_newer");
  auto stale_options = relay_options("stale", stale_role);
  stale_options.reconnect_backoff_base = 50ms;
  stale_options.reconnect_backoff_max = 100ms;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay stale(stale_options, std::move(holding));
  std::thread stale_runner([&] { stale.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 10; }, 20s)) << held.held();
  Relay newer(relay_options("newer", newer_role), sink());
  std::thread newer_runner([&] { newer.run(); });

  stale_role.cut_off();
  const bool taken_over = wait_until([&] { return unpublished() == 0; }, 10s);
  stale_role.let_back();
  held.release();  // the stale relay's acks: its marks must not count
  const bool fenced = wait_until([&] { return stale.stats().fenced == 10; }, 10s);
  newer.request_stop();
  stale.request_stop();
  newer_runner.join();
  stale_runner.join();

  ASSERT_TRUE(taken_over) << unpublished();
  EXPECT_TRUE(fenced) << stale.stats().fenced;
  EXPECT_EQ(stale.stats().published, 0U);
  EXPECT_EQ(newer.stats().published, 10U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE claimed_by LIKE 'newer:%' AND published_at IS NOT NULL"),
            10)
      << "the newer claims stand";
  expect_on_broker_in_order(ids);
}

// After a PostgreSQL restart every session has ended at once, and relays come back over their
// reconnect backoff. A relay whose session began before the server's start gets the longer
// restart grace (10 s): here it needs 1-2 s between tries, longer than the 1 s grace, while the
// other relay is back at once and looks every 500 ms. Its claims stay its own.
TEST_F(RelayTakeoverTest, ARelayBackWithinTheRestartGraceAfterAPostgresRestartKeepsItsClaims) {
  enqueue(10, 1);
  RelayRole slow_role(connection_, schema_, "takeover_slow");
  RelayRole quick_role(connection_, schema_, "takeover_quick");
  auto slow_options = relay_options("slow", slow_role);
  slow_options.reconnect_backoff_base = 2s;
  slow_options.reconnect_backoff_max = 2s;
  auto holding = std::make_unique<HoldingSink>(sink());
  HoldingSink& held = *holding;
  Relay slow(slow_options, std::move(holding));
  std::thread slow_runner([&] { slow.run(); });
  ASSERT_TRUE(wait_until([&] { return held.held() == 10; }, 20s)) << held.held();
  auto quick_options = relay_options("quick", quick_role);
  quick_options.reconnect_backoff_base = 50ms;
  quick_options.reconnect_backoff_max = 100ms;
  Relay quick(quick_options, sink());
  std::thread quick_runner([&] { quick.run(); });
  ASSERT_TRUE(
      wait_until([&] { return count(conn(), "SELECT count(*) FROM " + relays()) == 2; }, 10s));
  const std::string old_row(
      pg::exec(conn(), "SELECT relay_id FROM " + relays() + " WHERE relay_id LIKE 'slow:%'")
          .text(0, 0));
  // The relays commit asynchronously; a checkpoint keeps the claims through the crash.
  pg::exec(conn(), "CHECKPOINT");
  const auto crashed = std::chrono::steady_clock::now();
  postgres().restart_immediate();
  connection_ = connect();
  // The quick relay must see the slow one's old session ended while the slow one is still away.
  const std::string old_row_sql =
      "SELECT count(*) FROM " + relays() + " WHERE relay_id = $1 AND ended_at IS NOT NULL";
  const bool seen_ended =
      wait_until([&] { return count(conn(), old_row_sql, {old_row.c_str()}) == 1; }, 10s) &&
      slow.stats().reconnects == 0;
  const bool slow_back = wait_until([&] { return slow.stats().reconnects == 1; }, 15s);
  const auto slow_took = std::chrono::steady_clock::now() - crashed;
  std::this_thread::sleep_for(3s);
  const auto taken_by_quick = quick.stats().claimed;
  const long long still_slows = claimed_by("slow");
  held.release();
  const bool published = wait_until([&] { return unpublished() == 0; }, 10s);
  quick.request_stop();
  slow.request_stop();
  quick_runner.join();
  slow_runner.join();

  ASSERT_TRUE(slow_back);
  ASSERT_TRUE(seen_ended) << "the quick relay should have seen the old session ended first";
  std::cout << "the slow relay was back "
            << std::chrono::duration_cast<std::chrono::milliseconds>(slow_took).count()
            << " ms after the crash began\n";
  EXPECT_EQ(taken_by_quick, 0U) << "claims of a relay back within the restart grace were taken";
  EXPECT_EQ(still_slows, 10);
  EXPECT_TRUE(published);
  EXPECT_EQ(slow.stats().fenced, 0U);
  EXPECT_EQ(slow.stats().published, 10U);
}

// A dead session's row leaves the producers' NOTIFY count at once and is deleted once its leases
// are over; rows of older builds (no lock key) are never judged.
TEST_F(RelayTakeoverTest, ADeadSessionsRowGoesOnceItsLeasesAreOverAndOlderRowsAreLeftAlone) {
  RelayRole short_role(connection_, schema_, "takeover_short");
  RelayRole watcher_role(connection_, schema_, "takeover_watcher");
  pg::exec(conn(), "INSERT INTO " + relays() +
                       " (relay_id, listening, seen_at)"
                       " VALUES ('older-build', true, now())");
  auto short_options = relay_options("short", short_role);
  short_options.lease = 500ms;
  Relay short_lived(short_options, sink());
  std::thread short_runner([&] { short_lived.run(); });
  ASSERT_TRUE(wait_until(
      [&] {
        return count(conn(),
                     "SELECT count(*) FROM " + relays() + " WHERE relay_id LIKE 'short:%'") == 1;
      },
      10s));
  short_role.cut_off();
  Relay watcher(relay_options("watcher", watcher_role), sink());
  std::thread watcher_runner([&] { watcher.run(); });
  const std::string dead_row =
      "SELECT count(*) FROM " + relays() + " WHERE relay_id LIKE 'short:%'";
  const bool marked = wait_until(
      [&] {
        return count(conn(), dead_row + " AND seen_at = '-infinity' AND ended_at IS NOT NULL") == 1;
      },
      5s);
  // Ended, then a grace (1 s) and its lease (0.5 s) later gone.
  const bool deleted = wait_until([&] { return count(conn(), dead_row) == 0; }, 10s);
  const long long older = count(conn(), "SELECT count(*) FROM " + relays() +
                                            " WHERE relay_id = 'older-build' AND ended_at IS NULL");
  watcher.request_stop();
  short_lived.request_stop();
  watcher_runner.join();
  short_runner.join();
  EXPECT_TRUE(marked);
  EXPECT_TRUE(deleted);
  EXPECT_EQ(older, 1) << "a row without a lock key (an older relay) must be left alone";
}

}  // namespace
}  // namespace outbox::testing
