#include <gtest/gtest.h>

#include <thread>

#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

TEST(Migrate, CreatesTablesOnceAndRecordsTheVersion) {
  const SchemaName schema("migrate_once");
  auto connection = connect();
  PGconn* conn = connection.get();
  pg::exec(conn, "SET client_min_messages = warning");
  pg::exec(conn, "DROP SCHEMA IF EXISTS migrate_once CASCADE");

  const auto first = migrate(conn, schema);
  EXPECT_EQ(first.from_version, 0);
  EXPECT_EQ(first.to_version, latest_schema_version());
  EXPECT_EQ(first.applied, latest_schema_version());

  const auto second = migrate(conn, schema);
  EXPECT_EQ(second.from_version, latest_schema_version());
  EXPECT_EQ(second.applied, 0);

  EXPECT_EQ(count(conn, "SELECT count(*) FROM migrate_once.outbox_schema_migrations"),
            latest_schema_version());
  for (const char* table : {"outbox_events", "outbox_aggregate_sequences", "processed_events"}) {
    EXPECT_EQ(count(conn,
                    "SELECT count(*) FROM information_schema.tables "
                    "WHERE table_schema = 'migrate_once' AND table_name = $1",
                    {table}),
              1)
        << table;
  }
  // The pending-rows indexes are partial: published rows leave them.
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_indexes WHERE schemaname = 'migrate_once' "
                  "AND indexdef LIKE '%WHERE (published_at IS NULL)%'"),
            2);
}

TEST(Migrate, ConcurrentCallersSerializeAndApplyOnce) {
  const SchemaName schema("migrate_race");
  {
    auto connection = connect();
    pg::exec(connection.get(), "SET client_min_messages = warning");
    pg::exec(connection.get(), "DROP SCHEMA IF EXISTS migrate_race CASCADE");
  }
  std::atomic<int> applied{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      try {
        applied += migrate(database_url(), schema).applied;
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(applied, latest_schema_version());
}

TEST(Migrate, RefusesAConnectionInsideATransaction) {
  auto connection = connect();
  pg::exec(connection.get(), "BEGIN");
  EXPECT_THROW(migrate(connection.get(), SchemaName("migrate_busy")), InvalidArgument);
  pg::exec(connection.get(), "ROLLBACK");
  EXPECT_EQ(count(connection.get(),
                  "SELECT count(*) FROM information_schema.schemata WHERE schema_name = "
                  "'migrate_busy'"),
            0);
}

TEST(Migrate, RefusesADatabaseWithANewerSchema) {
  const SchemaName schema = fresh_schema();
  auto connection = connect();
  pg::exec(connection.get(), "INSERT INTO " + schema.table("outbox_schema_migrations") +
                                 " (version, name) VALUES (9999, 'from the future')");
  try {
    migrate(connection.get(), schema);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("newer than this build"), std::string::npos) << e.what();
  }
}

TEST(Migrate, UnreachableDatabaseIsARetryableError) {
  try {
    migrate("host=/nonexistent port=1 connect_timeout=1", SchemaName());
    FAIL() << "expected an error";
  } catch (const DatabaseError& e) {
    EXPECT_TRUE(e.retryable());
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace outbox::testing
