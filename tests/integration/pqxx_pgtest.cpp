// The producer inside a libpqxx transaction (outbox/pqxx.hpp): the event commits or rolls back
// with the business change, shares the aggregate's counter with the libpq producer, refuses what
// the rules refuse without spoiling the transaction, honours max_payload_bytes, and resolve_commit
// answers over a pqxx connection.

#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include "outbox/pqxx.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

class PqxxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = fresh_schema();
    pg::exec(libpq_.get(), "CREATE TABLE " + schema_.table("orders") + " (id text PRIMARY KEY)");
  }
  long long count_of(const std::string& sql) { return count(libpq_.get(), sql); }
  std::vector<std::int64_t> sequences(const std::string& aggregate_id) {
    return sequences_of(libpq_.get(), schema_, aggregate_id);
  }
  static NewEvent order(const std::string& id, const std::string& type) {
    return NewEvent{"order", id, type, R"({"total": 42})", R"({"tenant": "acme"})", 1, {}};
  }

  pg::Connection libpq_ = connect();
  pqxx::connection pqxx_{database_url()};
  SchemaName schema_;
};

TEST_F(PqxxTest, TheEventCommitsAndRollsBackWithTheBusinessChange) {
  const PqxxProducer producer(ProducerOptions{schema_});
  {
    pqxx::work tx(pqxx_);
    tx.exec("INSERT INTO " + schema_.table("orders") + " VALUES ('o-1')");
    const EnqueuedEvent e = producer.enqueue(tx, order("o-1", "OrderPlaced"));
    EXPECT_EQ(e.aggregate_sequence, 1);
    EXPECT_EQ(e.event_id.version(), 7);
    EXPECT_GT(e.transaction_id, 0U);
    tx.commit();
  }
  {
    pqxx::work tx(pqxx_);
    tx.exec("INSERT INTO " + schema_.table("orders") + " VALUES ('o-2')");
    producer.enqueue(tx, order("o-1", "Lost"));
    tx.abort();
  }
  EXPECT_EQ(count_of("SELECT count(*) FROM " + schema_.table("orders")), 1);
  EXPECT_EQ(sequences("o-1"), std::vector<std::int64_t>{1}) << "the rollback took both";
  EXPECT_EQ(count_of("SELECT count(*) FROM " + schema_.table("outbox_events") +
                     " WHERE headers->>'tenant' = 'acme' AND payload->>'total' = '42'"),
            1);
}

// Both drivers take the same counter row: alternating, with a batch on each side, gap-free.
TEST_F(PqxxTest, SharesTheAggregatesCounterWithTheLibpqProducer) {
  const PqxxProducer with_pqxx(ProducerOptions{schema_});
  const Producer with_libpq(ProducerOptions{schema_});
  for (int round = 0; round < 5; ++round) {
    pqxx::work tx(pqxx_);
    const std::vector<NewEvent> two = {order("shared", "A"), order("shared", "B")};
    const std::vector<EnqueuedEvent> e = with_pqxx.enqueue(tx, two);
    ASSERT_EQ(e.size(), 2U);
    EXPECT_EQ(e[1].aggregate_sequence, e[0].aggregate_sequence + 1);
    tx.commit();
    pg::exec(libpq_.get(), "BEGIN");
    with_libpq.enqueue(libpq_.get(), order("shared", "C"));
    pg::commit(libpq_.get());
  }
  const std::vector<std::int64_t> got = sequences("shared");
  ASSERT_EQ(got.size(), 15U);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<std::int64_t>(i + 1));
}

// A refused event throws before anything is sent: the transaction goes on and commits the rest.
TEST_F(PqxxTest, ARefusedEventLeavesTheTransactionUsable) {
  const PqxxProducer producer(ProducerOptions{schema_});
  pqxx::work tx(pqxx_);
  tx.exec("INSERT INTO " + schema_.table("orders") + " VALUES ('o-1')");
  NewEvent bad = order("o-1", "");
  EXPECT_THROW(producer.enqueue(tx, bad), InvalidArgument);
  const std::vector<NewEvent> batch = {order("o-1", "Fine"), order("o-1\x1b", "Hostile")};
  EXPECT_THROW(producer.enqueue(tx, batch), InvalidArgument) << "checked before any is written";
  producer.enqueue(tx, order("o-1", "OrderPlaced"));
  tx.commit();
  EXPECT_EQ(sequences("o-1"), std::vector<std::int64_t>{1});
  EXPECT_THROW(PqxxProducer(ProducerOptions{.schema = schema_, .table_less = true}),
               InvalidArgument);
}

// The option's size limit holds in the SQL function too: above the function's default of 900 KiB.
TEST_F(PqxxTest, MaxPayloadBytesIsTheLimitOnBothSides) {
  NewEvent large = order("o-1", "Large");
  large.payload = R"({"x": ")" + std::string(1200 * 1024, 'x') + R"("})";
  const PqxxProducer roomy(ProducerOptions{.schema = schema_, .max_payload_bytes = 2 << 20});
  pqxx::work tx(pqxx_);
  EXPECT_EQ(roomy.enqueue(tx, large).aggregate_sequence, 1);
  const PqxxProducer strict(ProducerOptions{.schema = schema_});
  EXPECT_THROW(strict.enqueue(tx, large), InvalidArgument);
  tx.commit();
  // Outside a transaction block each statement is its own transaction: the limit must still
  // reach the function (a set_config of its own would have ended with its own statement).
  pqxx::nontransaction autocommit(pqxx_);
  EXPECT_EQ(roomy.enqueue(autocommit, large).aggregate_sequence, 2);
}

TEST_F(PqxxTest, ResolveCommitAnswersOverAPqxxConnection) {
  const PqxxProducer producer(ProducerOptions{schema_});
  EnqueuedEvent committed;
  {
    pqxx::work tx(pqxx_);
    committed = producer.enqueue(tx, order("o-1", "Kept"));
    tx.commit();
  }
  EnqueuedEvent aborted;
  {
    pqxx::work tx(pqxx_);
    aborted = producer.enqueue(tx, order("o-2", "Dropped"));
    tx.abort();
  }
  pqxx::connection asker(database_url());
  EXPECT_EQ(resolve_commit(asker, schema_, committed), TransactionStatus::committed);
  EXPECT_EQ(resolve_commit(asker, schema_, aborted), TransactionStatus::aborted);
  pqxx::work open(pqxx_);
  const EnqueuedEvent pending = producer.enqueue(open, order("o-3", "Open"));
  EXPECT_EQ(resolve_commit(asker, schema_, pending, std::chrono::milliseconds(200)),
            TransactionStatus::in_progress);
  open.commit();
  EXPECT_EQ(resolve_commit(asker, schema_, pending), TransactionStatus::committed);
}

}  // namespace
}  // namespace outbox::testing
