#include <gtest/gtest.h>

#include <thread>

#include "outbox/inbox.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

class InboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = fresh_schema();
    pg::exec(conn(), "CREATE TABLE " + schema_.table("balance") + " (amount int NOT NULL)");
    pg::exec(conn(), "INSERT INTO " + schema_.table("balance") + " VALUES (0)");
  }
  std::function<void(PGconn*)> credit(int amount) {
    return [this, amount](PGconn* c) {
      pg::exec(c, "UPDATE " + schema_.table("balance") + " SET amount = amount + $1",
               {std::to_string(amount).c_str()});
    };
  }
  long long balance() { return count(conn(), "SELECT amount FROM " + schema_.table("balance")); }
  long long processed() {
    return count(conn(), "SELECT count(*) FROM " + schema_.table("processed_events"));
  }
  PGconn* conn() { return connection_.get(); }
  pg::Connection connection_ = connect();
  SchemaName schema_;
};

TEST_F(InboxTest, ADuplicateDeliveryHasOneEffect) {
  const Inbox inbox(schema_, "billing");
  const EventId id = EventId::generate();
  EXPECT_EQ(inbox.process(conn(), id, credit(10)), InboxResult::applied);
  EXPECT_EQ(inbox.process(conn(), id, credit(10)), InboxResult::duplicate);
  EXPECT_EQ(inbox.process(conn(), id, credit(10)), InboxResult::duplicate);
  EXPECT_EQ(balance(), 10);
  EXPECT_EQ(processed(), 1);
}

TEST_F(InboxTest, EachConsumerNameAppliesAnEventOnce) {
  const EventId id = EventId::generate();
  EXPECT_EQ(Inbox(schema_, "billing").process(conn(), id, credit(1)), InboxResult::applied);
  EXPECT_EQ(Inbox(schema_, "shipping").process(conn(), id, credit(100)), InboxResult::applied);
  EXPECT_EQ(Inbox(schema_, "shipping").process(conn(), id, credit(100)), InboxResult::duplicate);
  EXPECT_EQ(balance(), 101);
}

TEST_F(InboxTest, AFailingEffectLeavesNoTraceAndCanBeRetried) {
  const Inbox inbox(schema_, "billing");
  const EventId id = EventId::generate();
  EXPECT_THROW(inbox.process(conn(), id,
                             [&](PGconn* c) {
                               credit(5)(c);
                               throw std::runtime_error("downstream said no");
                             }),
               std::runtime_error);
  EXPECT_EQ(balance(), 0);
  EXPECT_EQ(processed(), 0);
  EXPECT_EQ(PQtransactionStatus(conn()), PQTRANS_IDLE);
  EXPECT_EQ(inbox.process(conn(), id, credit(5)), InboxResult::applied);
  EXPECT_EQ(balance(), 5);
}

TEST_F(InboxTest, AnEffectThatSwallowsAFailedStatementIsNotCommitted) {
  const Inbox inbox(schema_, "billing");
  const EventId id = EventId::generate();
  EXPECT_THROW(inbox.process(conn(), id,
                             [&](PGconn* c) {
                               credit(5)(c);
                               PQclear(PQexec(c, "SELECT * FROM no_such_table"));  // ignored
                             }),
               InvalidArgument);
  EXPECT_EQ(balance(), 0);
  EXPECT_EQ(processed(), 0);
}

TEST_F(InboxTest, TwinConsumersRacingOnOneEventApplyItOnce) {
  const Inbox inbox(schema_, "billing");
  const EventId id = EventId::generate();
  std::atomic<bool> first_inside{false};
  InboxResult first_result{};
  std::thread first([&] {
    auto c = connect();
    first_result = inbox.process(c.get(), id, [&](PGconn* pc) {
      credit(7)(pc);
      first_inside = true;
      std::this_thread::sleep_for(300ms);  // the twin arrives meanwhile and must wait
    });
  });
  while (!first_inside) std::this_thread::sleep_for(5ms);
  auto c2 = connect();
  const InboxResult second_result = inbox.process(c2.get(), id, credit(7));
  first.join();
  EXPECT_EQ(first_result, InboxResult::applied);
  EXPECT_EQ(second_result, InboxResult::duplicate);
  EXPECT_EQ(balance(), 7);
}

TEST_F(InboxTest, RefusesAConnectionInsideATransaction) {
  const Inbox inbox(schema_, "billing");
  pg::exec(conn(), "BEGIN");
  EXPECT_THROW(inbox.process(conn(), EventId::generate(), credit(1)), InvalidArgument);
  pg::exec(conn(), "ROLLBACK");
  EXPECT_THROW(Inbox(schema_, ""), InvalidArgument);
  EXPECT_THROW(inbox.process(conn(), EventId{}, credit(1)), InvalidArgument);
  EXPECT_EQ(balance(), 0);
}

}  // namespace
}  // namespace outbox::testing
