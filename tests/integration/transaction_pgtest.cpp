#include <gtest/gtest.h>

#include "outbox/producer.hpp"
#include "outbox/transaction.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

class TransactionTest : public ::testing::Test {
 protected:
  void SetUp() override { schema_ = fresh_schema(); }
  EnqueuedEvent enqueue(PGconn* conn) {
    return Producer(ProducerOptions{schema_, 4096})
        .enqueue(conn, NewEvent{"order", "o1", "OrderPlaced", "{}", "{}", 1, {}});
  }
  long long events() {
    return count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events"));
  }
  PGconn* conn() { return connection_.get(); }
  pg::Connection connection_ = connect();
  SchemaName schema_;
};

TEST_F(TransactionTest, EnqueueReturnsTheIdOfTheCallersTransaction) {
  pg::exec(conn(), "BEGIN");
  const auto enqueued = enqueue(conn());
  EXPECT_EQ(enqueued.transaction_id, current_transaction_id(conn()));
  pg::commit(conn());
  EXPECT_EQ(transaction_status(conn(), enqueued.transaction_id), TransactionStatus::committed);
  EXPECT_EQ(resolve_commit(conn(), schema_, enqueued.transaction_id, enqueued.event_id),
            TransactionStatus::committed);
  EXPECT_THROW(current_transaction_id(conn()), InvalidArgument);
}

TEST_F(TransactionTest, TellsCommittedFromAbortedFromStillRunning) {
  auto other = connect();
  pg::exec(other.get(), "BEGIN");
  const auto open = enqueue(other.get());
  EXPECT_EQ(transaction_status(conn(), open.transaction_id), TransactionStatus::in_progress);
  pg::exec(other.get(), "ROLLBACK");
  EXPECT_EQ(transaction_status(conn(), open.transaction_id), TransactionStatus::aborted);
  EXPECT_EQ(to_string(TransactionStatus::aborted), std::string("aborted"));
}

// The connection dies before COMMIT reaches the server: the client only knows the outcome is
// unknown; the server knows the transaction aborted, and nothing was written.
TEST_F(TransactionTest, ABrokenCommitIsOutcomeUnknownAndResolvesByTransactionId) {
  auto doomed = connect();
  pg::exec(doomed.get(), "BEGIN");
  const auto enqueued = enqueue(doomed.get());
  const std::string pid = std::to_string(PQbackendPID(doomed.get()));
  pg::exec(conn(), "SELECT pg_terminate_backend($1::int)", {pid.c_str()});
  try {
    outbox::commit(doomed.get());
    ADD_FAILURE() << "expected OutcomeUnknown";
  } catch (const OutcomeUnknown& e) {
    EXPECT_FALSE(e.retryable()) << "the caller's transaction must be resolved, not retried blindly";
  }
  TransactionStatus status = TransactionStatus::in_progress;
  for (int i = 0; i < 100 && status == TransactionStatus::in_progress; ++i) {
    status = transaction_status(conn(), enqueued.transaction_id);
  }
  EXPECT_EQ(status, TransactionStatus::aborted);
  EXPECT_EQ(resolve_commit(conn(), schema_, enqueued.transaction_id, enqueued.event_id),
            TransactionStatus::aborted);
  EXPECT_EQ(events(), 0);
}

}  // namespace
}  // namespace outbox::testing
