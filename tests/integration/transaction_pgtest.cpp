#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "outbox/cleanup.hpp"
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

// After a crash the server's next transaction id can be below one it handed out but never made
// durable: pg_xact_status then raises "in the future" (the crash campaign met it). That
// transaction did not commit.
TEST_F(TransactionTest, AnIdTheServerHasNotReachedIsAborted) {
  pg::exec(conn(), "BEGIN");
  const std::uint64_t now = current_transaction_id(conn());
  pg::exec(conn(), "ROLLBACK");
  EXPECT_EQ(transaction_status(conn(), now + 1000000), TransactionStatus::aborted);
  // Asked inside the caller's own transaction block: answered, and that transaction goes on.
  pg::exec(conn(), "BEGIN");
  pg::exec(conn(), "CREATE TEMP TABLE kept (x int)");
  EXPECT_EQ(transaction_status(conn(), now + 1000000), TransactionStatus::aborted);
  EXPECT_EQ(transaction_status(conn(), now), TransactionStatus::aborted);
  EXPECT_EQ(PQtransactionStatus(conn()), PQTRANS_INTRANS);
  pg::exec(conn(), "INSERT INTO kept VALUES (1)");
  pg::commit(conn());
  EXPECT_EQ(pg::exec(conn(), "SELECT count(*) FROM kept").int64(0, 0), 1);
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

// Before the cleanup horizon, a committed event that cleanup deleted read as "aborted", and the
// caller would have run a committed transaction again. It must never be called aborted.
TEST_F(TransactionTest, AnEventRetentionCleanupDeletedIsNeverCalledAborted) {
  pg::exec(conn(), "BEGIN");
  const auto enqueued = enqueue(conn());
  pg::commit(conn());
  pg::exec(conn(), "UPDATE " + schema_.table("outbox_events") + " SET published_at = now()");
  CleanupOptions options;
  options.schema = schema_;
  options.retention = std::chrono::milliseconds(0);
  EXPECT_THROW(cleanup(conn(), options), InvalidArgument) << "below the minimum retention";
  EXPECT_EQ(events(), 1);
  options.allow_short_retention = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(cleanup(conn(), options).events_deleted, 1U);
  EXPECT_EQ(resolve_commit(conn(), schema_, enqueued.transaction_id, enqueued.event_id),
            TransactionStatus::unknown);
  EXPECT_EQ(resolve_commit(conn(), schema_,
                           CommitOutcomeUnknown("lost", {enqueued.event_id}, 2147483647)),
            TransactionStatus::unknown);
  // An id the caller made itself (not a UUIDv7) has no age: unknown as well.
  const EventId own = *EventId::parse("6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b");
  EXPECT_EQ(resolve_commit(conn(), schema_, CommitOutcomeUnknown("lost", {own}, 2147483647)),
            TransactionStatus::unknown);
  // A transaction that rolled back after the horizon is still told apart. (The horizon never
  // moves back, migration 13; the owner sets an older one by replacing the row.)
  pg::exec(conn(), "DELETE FROM " + schema_.table("outbox_cleanup_horizon"));
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_cleanup_horizon") +
                       " (deleted_before) VALUES (now() - interval '1 hour')");
  auto other = connect();
  pg::exec(other.get(), "BEGIN");
  const auto rolled_back = enqueue(other.get());
  pg::exec(other.get(), "ROLLBACK");
  EXPECT_EQ(resolve_commit(conn(), schema_, rolled_back.transaction_id, rolled_back.event_id),
            TransactionStatus::aborted);
  // With a slot registered for table-less events a missing event may be one that committed
  // without a row: never `aborted` then.
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_table_less_slots") +
                       " (slot_name, relay_id) VALUES ('some_slot', 'r')");
  EXPECT_EQ(resolve_commit(conn(), schema_, rolled_back.transaction_id, rolled_back.event_id),
            TransactionStatus::unknown);
}

// enqueue_and_commit: the inserts and COMMIT in one round trip, with every outcome of both.
class EnqueueAndCommitTest : public TransactionTest {
 protected:
  void SetUp() override {
    TransactionTest::SetUp();
    pg::exec(conn(), "CREATE TABLE " + schema_.table("orders") + " (id text PRIMARY KEY)");
    producer_.emplace(ProducerOptions{schema_, 4096});
  }
  long long orders() { return count(conn(), "SELECT count(*) FROM " + schema_.table("orders")); }
  static NewEvent event(const std::string& aggregate, const std::string& type = "Step") {
    return NewEvent{"order", aggregate, type, R"({"n": 1})", "{}", 1, {}};
  }
  void begin_with_order(PGconn* c, const std::string& id) {
    pg::exec(c, "BEGIN");
    pg::exec(c, "INSERT INTO " + schema_.table("orders") + " VALUES ($1)", {id.c_str()});
  }
  // The SQLSTATE enqueue_and_commit of `e` is refused with ("" if it was not refused); an
  // unknown outcome is a failure: a refusal is always known.
  std::string refusal(const NewEvent& e) {
    try {
      producer_->enqueue_and_commit(conn(), e);
    } catch (const CommitOutcomeUnknown& unknown) {
      ADD_FAILURE() << "a refusal is not an unknown outcome: " << unknown.what();
    } catch (const DatabaseError& error) {
      EXPECT_TRUE(error.sqlstate() != "26000" || error.retryable());
      return error.sqlstate();
    }
    return "";
  }
  std::optional<Producer> producer_;
};

TEST_F(EnqueueAndCommitTest, CommitsTheBusinessChangeAndTheEventsTogether) {
  const Producer producer(ProducerOptions{schema_, 4096});
  for (int round = 0; round < 3; ++round) {  // the first prepares in the same round trip
    begin_with_order(conn(), "o" + std::to_string(round));
    const std::vector<NewEvent> batch = {event("a"), event("b"), event("a", "Again")};
    const auto enqueued = producer.enqueue_and_commit(conn(), batch);
    EXPECT_EQ(PQtransactionStatus(conn()), PQTRANS_IDLE) << "committed";
    ASSERT_EQ(enqueued.size(), 3U);
    EXPECT_EQ(enqueued[0].aggregate_sequence, 2 * round + 1);
    EXPECT_EQ(enqueued[1].aggregate_sequence, round + 1);
    EXPECT_EQ(enqueued[2].aggregate_sequence, 2 * round + 2);
    EXPECT_EQ(transaction_status(conn(), enqueued[0].transaction_id), TransactionStatus::committed);
  }
  EXPECT_EQ(orders(), 3);
  EXPECT_EQ(events(), 9);
  // Prepared once each over three rounds: the statement for a lone event ("b") and the one for
  // several events of an aggregate ("a").
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'outbox%'"),
            2);
  // Unprepared, on another connection.
  ProducerOptions options{schema_, 4096};
  options.prepare_statements = false;
  auto plain = connect();
  begin_with_order(plain.get(), "p");
  EXPECT_EQ(Producer(options).enqueue_and_commit(plain.get(), event("c")).aggregate_sequence, 1);
  EXPECT_EQ(orders(), 4);
  EXPECT_EQ(events(), 10);
}

TEST_F(EnqueueAndCommitTest, ARefusedInsertLeavesTheTransactionAbortedAndNothingWritten) {
  begin_with_order(conn(), "o1");
  NewEvent first = event("a");
  first.event_id = EventId::generate();
  producer_->enqueue(conn(), first);
  pg::commit(conn());

  begin_with_order(conn(), "o2");
  EXPECT_EQ(refusal(first), "23505");  // the same event id again
  EXPECT_EQ(PQtransactionStatus(conn()), PQTRANS_INERROR) << "the caller rolls back";
  pg::exec(conn(), "ROLLBACK");
  EXPECT_EQ(orders(), 1);
  EXPECT_EQ(events(), 1);
  // The connection is out of pipeline mode and usable.
  begin_with_order(conn(), "o3");
  producer_->enqueue_and_commit(conn(), event("b"));
  EXPECT_EQ(orders(), 2);
}

TEST_F(EnqueueAndCommitTest, ARefusedCommitIsADatabaseErrorAndNothingIsWritten) {
  // A deferred unique constraint fails only at COMMIT.
  pg::exec(conn(), "CREATE TABLE " + schema_.table("slots") +
                       " (n int, CONSTRAINT one UNIQUE (n) DEFERRABLE INITIALLY DEFERRED)");
  begin_with_order(conn(), "o1");
  pg::exec(conn(), "INSERT INTO " + schema_.table("slots") + " VALUES (1), (1)");
  EXPECT_EQ(refusal(event("a")), "23505");
  EXPECT_EQ(PQtransactionStatus(conn()), PQTRANS_IDLE) << "the transaction is over";
  EXPECT_EQ(orders(), 0);
  EXPECT_EQ(events(), 0);
}

TEST_F(EnqueueAndCommitTest, AStatementDiscardedBehindItsBackFailsRetryably) {
  begin_with_order(conn(), "o1");
  producer_->enqueue_and_commit(conn(), event("a"));
  pg::exec(conn(), "DISCARD ALL");
  begin_with_order(conn(), "o2");
  EXPECT_EQ(refusal(event("a")), "26000");  // and retryable (checked in refusal)
  pg::exec(conn(), "ROLLBACK");
  begin_with_order(conn(), "o2");
  EXPECT_EQ(producer_->enqueue_and_commit(conn(), event("a")).aggregate_sequence, 2);
  EXPECT_EQ(orders(), 2);
}

// The server session dies inside the COMMIT (a deferred trigger terminates it): the outcome is
// unknown to the client; resolve_commit waits for the session to end and finds no event.
TEST_F(EnqueueAndCommitTest, ALostCommitIsResolvedAfterItsSessionEnded) {
  pg::exec(conn(), fmt::format(R"SQL(
CREATE FUNCTION {s}.die_in_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER die_in_commit AFTER INSERT ON {s}.orders
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.die_in_commit();)SQL",
                               fmt::arg("s", schema_.quoted())));
  auto doomed = connect();
  const int pid = PQbackendPID(doomed.get());
  begin_with_order(doomed.get(), "o1");
  try {
    producer_->enqueue_and_commit(doomed.get(), event("a"));
    FAIL() << "expected CommitOutcomeUnknown";
  } catch (const CommitOutcomeUnknown& e) {
    EXPECT_FALSE(e.retryable()) << "resolve first, never retry blindly";
    ASSERT_EQ(e.event_ids().size(), 1U);
    EXPECT_EQ(e.backend_pid(), pid);
    EXPECT_EQ(resolve_commit(conn(), schema_, e, std::chrono::seconds(10)),
              TransactionStatus::aborted);
  }
  EXPECT_EQ(orders(), 0);
  EXPECT_EQ(events(), 0);
}

// resolve_commit by session: in progress while the session lives, then the event's presence.
TEST_F(EnqueueAndCommitTest, ResolvingBySessionWaitsForTheSessionThenLooksForTheEvent) {
  auto other = connect();
  begin_with_order(other.get(), "o1");
  const auto committed = producer_->enqueue_and_commit(other.get(), event("a"));
  const CommitOutcomeUnknown as_if_lost("test", {committed.event_id}, PQbackendPID(other.get()));
  EXPECT_EQ(resolve_commit(conn(), schema_, as_if_lost, std::chrono::milliseconds(200)),
            TransactionStatus::in_progress)
      << "the session still exists";
  other = pg::Connection::open(database_url());  // the old session ends
  EXPECT_EQ(resolve_commit(conn(), schema_, as_if_lost, std::chrono::seconds(10)),
            TransactionStatus::committed);
  const CommitOutcomeUnknown never("test", {EventId::generate()},
                                   PQbackendPID(other.get()) + 1000000);
  EXPECT_EQ(resolve_commit(conn(), schema_, never), TransactionStatus::aborted);
}

}  // namespace
}  // namespace outbox::testing
