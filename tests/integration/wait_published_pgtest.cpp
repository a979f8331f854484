// Answer after publish: wait_published against a real relay, and what ends a wait early.
#include <gtest/gtest.h>

#include <thread>

#include "outbox/discard_sink.hpp"
#include "outbox/roles.hpp"
#include "outbox/wait_published.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

class WaitPublishedTest : public RelayFixture {};

TEST_F(WaitPublishedTest, WithoutARelayItWaitsOutItsTimeout) {
  const auto ids = enqueue(2, 1);
  WaitOptions options;
  options.timeout = 150ms;
  const auto started = std::chrono::steady_clock::now();
  const PublishWait wait = wait_published(conn(), schema_, ids, options);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 150ms);
  EXPECT_FALSE(wait.all_published());
  EXPECT_EQ(wait.waiting.size(), 2U);
  EXPECT_GT(wait.polls, 3U);  // 2, 4, 8, 16, 32, 64 ms ...
  EXPECT_LT(wait.polls, 20U);
}

TEST_F(WaitPublishedTest, ItReturnsOnceTheRelayMarkedThemPublished) {
  const auto ids = enqueue(3, 2);
  Relay relay(options("r1"), make_discard_sink());
  std::thread runner([&] { relay.run(); });
  const PublishWait wait = wait_published(conn(), schema_, ids);
  relay.request_stop();
  runner.join();
  EXPECT_TRUE(wait.all_published());
  EXPECT_EQ(wait.published.size(), 6U);
  EXPECT_EQ(unpublished(), 0);
}

TEST_F(WaitPublishedTest, QuarantinedAndUnknownEventsEndTheWaitAtOnce) {
  const auto ids = enqueue(2, 1);
  pg::exec(conn(),
           "UPDATE " + schema_.table("outbox_events") +
               " SET quarantined_at = now(), quarantine_reason = 'r' WHERE event_id = $1",
           {ids[0].to_string().c_str()});
  std::vector<EventId> asked{ids[0], EventId::generate()};
  WaitOptions options;
  options.timeout = 10s;
  const auto started = std::chrono::steady_clock::now();
  const PublishWait wait = wait_published(conn(), schema_, asked, options);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
  EXPECT_EQ(wait.stopped, std::vector{ids[0]});
  EXPECT_EQ(wait.not_found, std::vector{asked[1]});
  EXPECT_EQ(wait.polls, 1U);
}

TEST_F(WaitPublishedTest, AWriterMayWaitAndRefusesABusyConnection) {
  const RoleNames roles = create_roles(conn(), schema_);
  auto writer = pg::Connection::open(database_url() + " options='-c role=" + roles.writer + "'");
  const auto ids = enqueue(1, 1);
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") + " SET published_at = now()");
  EXPECT_TRUE(wait_published(writer.get(), schema_, ids).all_published());
  WaitOptions forever;
  forever.timeout = std::chrono::milliseconds::max();  // would overflow the deadline
  EXPECT_THROW(wait_published(writer.get(), schema_, ids, forever), InvalidArgument);
  pg::exec(writer.get(), "BEGIN");
  EXPECT_THROW(wait_published(writer.get(), schema_, ids), InvalidArgument);
}

}  // namespace
}  // namespace outbox::testing
