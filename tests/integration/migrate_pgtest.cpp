#include <gtest/gtest.h>

#include <thread>

#include "outbox/roles.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

// A connection, with `schema` gone: what migrate finds on a database outbox never touched.
pg::Connection connect_without(const SchemaName& schema) {
  auto connection = connect();
  pg::exec(connection.get(), "SET client_min_messages = warning");
  pg::exec(connection.get(), "DROP SCHEMA IF EXISTS " + schema.quoted() + " CASCADE");
  return connection;
}

TEST(Migrate, CreatesTablesOnceAndRecordsTheVersion) {
  const SchemaName schema("migrate_once");
  auto connection = connect_without(schema);
  PGconn* conn = connection.get();

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
  // The pending-rows index is partial: published and skipped rows leave it.
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_indexes WHERE schemaname = 'migrate_once' "
                  "AND indexdef LIKE '%WHERE ((published_at IS NULL) AND (skipped_at IS NULL))%'"),
            1);
}

// A database migrated by an older build is brought forward, keeping its rows.
TEST(Migrate, UpgradesFromTheFirstVersionKeepingRows) {
  const SchemaName schema("migrate_upgrade");
  auto connection = connect_without(schema);
  PGconn* conn = connection.get();
  migrate(conn, schema);
  // Roll the schema back to what version 1 created, as an older build would have left it.
  pg::exec(conn, R"SQL(
    DROP FUNCTION migrate_upgrade.enqueue, migrate_upgrade.outbox_check_name,
      migrate_upgrade.outbox_hostile_pattern, migrate_upgrade.outbox_kafka_header_bytes;
    DROP TABLE migrate_upgrade.outbox_cleanup_horizon;
    DROP TABLE migrate_upgrade.outbox_inbox_consumers;
    DROP TABLE migrate_upgrade.inbox_aggregates, migrate_upgrade.inbox_parked;
    DROP TRIGGER outbox_aggregate_sequences_forward ON migrate_upgrade.outbox_aggregate_sequences;
    DROP FUNCTION migrate_upgrade.outbox_refuse_rewrite();
    DROP TABLE migrate_upgrade.outbox_table_less_slots;
    DROP FUNCTION migrate_upgrade.outbox_table_less_ready();
    DROP TABLE migrate_upgrade.outbox_relays;
    CREATE OR REPLACE FUNCTION migrate_upgrade.outbox_events_notify() RETURNS trigger
      LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('migrate_upgrade_outbox', ''); RETURN NULL; END $$;
    DROP TABLE migrate_upgrade.outbox_operator_audit;
    DROP INDEX migrate_upgrade.outbox_events_quarantined_idx;
    DROP INDEX migrate_upgrade.outbox_events_pending_aggregate_idx;
    ALTER TABLE migrate_upgrade.outbox_events RESET (fillfactor),
      ADD CONSTRAINT outbox_events_aggregate_sequence_key
        UNIQUE (aggregate_type, aggregate_id, aggregate_sequence);
    ALTER TABLE migrate_upgrade.outbox_events DROP COLUMN quarantined_at,
      DROP COLUMN quarantine_reason, DROP COLUMN skipped_at, DROP COLUMN in_doubt_at,
      DROP COLUMN in_doubt_reason;
    CREATE INDEX outbox_events_pending_due_idx ON migrate_upgrade.outbox_events (available_at)
      WHERE published_at IS NULL;
    CREATE INDEX outbox_events_pending_aggregate_idx ON migrate_upgrade.outbox_events
      (aggregate_type, aggregate_id, aggregate_sequence) WHERE published_at IS NULL;
    DELETE FROM migrate_upgrade.outbox_schema_migrations WHERE version > 1;
    INSERT INTO migrate_upgrade.outbox_events (event_id, aggregate_type, aggregate_id,
      aggregate_sequence, event_type, payload) VALUES (gen_random_uuid(), 'order', '1', 1, 'X', '{}');
  )SQL");
  const auto report = migrate(conn, schema);
  EXPECT_EQ(report.from_version, 1);
  EXPECT_EQ(report.to_version, latest_schema_version());
  EXPECT_EQ(
      count(conn, "SELECT count(*) FROM migrate_upgrade.outbox_events WHERE skipped_at IS NULL"),
      1);
  EXPECT_EQ(count(conn, "SELECT count(*) FROM migrate_upgrade.outbox_relays"), 0)
      << "migration 3 creates the relays' state table";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_proc WHERE proname = 'outbox_events_notify'"
                  " AND pronamespace = 'migrate_upgrade'::regnamespace"
                  " AND prosrc LIKE '%outbox_relays%'"),
            1)
      << "migration 3 makes the trigger ask whether a relay is awake";
  EXPECT_EQ(
      count(conn,
            "SELECT count(*) FROM pg_class WHERE oid = 'migrate_upgrade.outbox_events'::regclass"
            " AND reloptions @> ARRAY['fillfactor=50']"),
      1)
      << "migration 4 leaves room on each page for the claim's HOT update";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_constraint WHERE conrelid = "
                  "'migrate_upgrade.outbox_events'::regclass AND contype = 'u'"),
            0)
      << "migration 5 drops the whole-history unique constraint";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                  "WHERE c.relname = 'outbox_events_pending_aggregate_idx' AND i.indisunique "
                  "AND c.relnamespace = 'migrate_upgrade'::regnamespace"),
            1)
      << "migration 5 makes the pending index unique";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_proc WHERE proname = 'outbox_events_notify'"
                  " AND pronamespace = 'migrate_upgrade'::regnamespace"
                  " AND prosrc LIKE '%bool_and(listening)%'"),
            1)
      << "migration 6 makes the trigger wake relays only when one listens and none is awake";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_events_notify'"
                  " AND tgrelid = 'migrate_upgrade.outbox_events'::regclass"
                  " AND pg_get_triggerdef(oid) LIKE '%WHEN%outbox.wake_checked%'"),
            1)
      << "migration 7 lets the trigger skip itself when the producer has decided";
  EXPECT_EQ(count(conn, "SELECT count(*) FROM migrate_upgrade.outbox_cleanup_horizon"), 0)
      << "migration 8 creates the cleanup horizon, empty";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                  "'migrate_upgrade' AND table_name = 'outbox_relays' AND column_name IN "
                  "('lock_key', 'lease_ms', 'registered_at', 'ended_at') AND is_nullable = 'YES'"),
            4)
      << "migration 9 records each relay session's lock (nullable: older relays write no lock)";
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_trigger WHERE tgrelid IN"
                  " ('migrate_upgrade.outbox_aggregate_sequences'::regclass,"
                  "  'migrate_upgrade.outbox_cleanup_horizon'::regclass)"
                  " AND tgname LIKE '%forward' OR tgname = 'outbox_cleanup_horizon_not_ahead'"
                  " AND tgrelid = 'migrate_upgrade.outbox_cleanup_horizon'::regclass"),
            3)
      << "migration 13 keeps counters and the horizon from going back";
}

// Migrations 12 to 14 on a database a build of version 11 has been using (events, counters, an
// audit row, a horizon a wrong clock put ahead of now, inbox rows, a relay's row, a table-less
// slot): rows kept, old rows left without what they could not record (backend_pid, db_user), the
// horizon brought back to now (else every later cleanup would be refused), the table-less
// proof's publication made with where it begins, and the roles' grants apply, twice.
TEST(Migrate, UpgradesAVersionElevenDatabaseWithDataAndTheRolesApplyAgain) {
  const SchemaName schema("migrate_from_eleven");
  auto connection = connect_without(schema);
  PGconn* conn = connection.get();
  migrate(conn, schema);
  pg::exec(conn, R"SQL(
    DROP FUNCTION migrate_from_eleven.enqueue, migrate_from_eleven.outbox_check_name,
      migrate_from_eleven.outbox_hostile_pattern, migrate_from_eleven.outbox_kafka_header_bytes;
    ALTER TABLE migrate_from_eleven.outbox_relays DROP COLUMN slot_name, DROP COLUMN slot_mode,
      DROP COLUMN walsender_pid, DROP COLUMN published, DROP COLUMN health;
    DROP TABLE migrate_from_eleven.outbox_inbox_consumers;
    DROP TRIGGER outbox_aggregate_sequences_forward ON migrate_from_eleven.outbox_aggregate_sequences;
    DROP TRIGGER outbox_cleanup_horizon_forward ON migrate_from_eleven.outbox_cleanup_horizon;
    DROP TRIGGER outbox_cleanup_horizon_not_ahead ON migrate_from_eleven.outbox_cleanup_horizon;
    DROP FUNCTION migrate_from_eleven.outbox_refuse_rewrite();
    ALTER TABLE migrate_from_eleven.outbox_operator_audit DROP COLUMN db_user,
      DROP COLUMN consumer_name;
    DROP TABLE migrate_from_eleven.inbox_aggregates, migrate_from_eleven.inbox_parked;
    ALTER TABLE migrate_from_eleven.outbox_relays DROP COLUMN backend_pid;
    ALTER TABLE migrate_from_eleven.outbox_table_less_slots DROP COLUMN witness_since;
    ALTER TABLE migrate_from_eleven.outbox_events DROP COLUMN in_doubt_at,
      DROP COLUMN in_doubt_reason;
    DROP PUBLICATION IF EXISTS migrate_from_eleven_outbox_seq;
    DELETE FROM migrate_from_eleven.outbox_schema_migrations WHERE version > 11;
    INSERT INTO migrate_from_eleven.outbox_events (event_id, aggregate_type, aggregate_id,
      aggregate_sequence, event_type, payload) VALUES (gen_random_uuid(), 'order', '1', 7, 'X', '{}');
    INSERT INTO migrate_from_eleven.outbox_aggregate_sequences VALUES ('order', '1', 7);
    INSERT INTO migrate_from_eleven.outbox_operator_audit (event_id, action, actor, reason)
      VALUES (gen_random_uuid(), 'retry', 'ops', 'before 12');
    INSERT INTO migrate_from_eleven.outbox_cleanup_horizon VALUES (true, now() + interval '1 day');
    INSERT INTO migrate_from_eleven.outbox_table_less_slots (slot_name, relay_id)
      VALUES ('from_eleven_tl', 'r');
    INSERT INTO migrate_from_eleven.processed_events (consumer_name, event_id)
      VALUES ('billing', gen_random_uuid());
    INSERT INTO migrate_from_eleven.outbox_relays (relay_id, listening, lock_key)
      VALUES ('r:1', true, 42);
  )SQL");
  EXPECT_THROW(create_roles(conn, schema), Error) << "grants wait for the migration";
  const auto report = migrate(conn, schema);
  EXPECT_EQ(report.from_version, 11);
  EXPECT_EQ(report.to_version, latest_schema_version());
  EXPECT_NO_THROW(create_roles(conn, schema));
  EXPECT_NO_THROW(create_roles(conn, schema));
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM migrate_from_eleven.outbox_operator_audit"
                  " WHERE db_user IS NULL"),
            1);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM migrate_from_eleven.outbox_relays"
                  " WHERE backend_pid IS NULL AND lock_key = 42"),
            1);
  EXPECT_EQ(count(conn, "SELECT count(*) FROM migrate_from_eleven.processed_events"), 1);
  EXPECT_EQ(count(conn, "SELECT count(*) FROM migrate_from_eleven.outbox_events"), 1);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM migrate_from_eleven.outbox_cleanup_horizon"
                  " WHERE deleted_before <= now()"),
            1);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM migrate_from_eleven.outbox_table_less_slots"
                  " WHERE witness_since IS NOT NULL"),
            1);
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM pg_publication p JOIN pg_publication_rel r ON "
                  "r.prpubid = p.oid WHERE p.pubname = 'migrate_from_eleven_outbox_seq' "
                  "AND p.pubinsert AND p.pubupdate AND r.prrelid = "
                  "'migrate_from_eleven.outbox_aggregate_sequences'::regclass"),
            1);
  EXPECT_THROW(pg::exec(conn,
                        "UPDATE migrate_from_eleven.outbox_aggregate_sequences"
                        " SET last_sequence = 6"),
               DatabaseError);
  pg::exec(conn, "UPDATE migrate_from_eleven.outbox_aggregate_sequences SET last_sequence = 8");
  pg::exec(conn, "DROP PUBLICATION migrate_from_eleven_outbox_seq");
  EXPECT_EQ(count(conn,
                  "SELECT count(*) FROM migrate_from_eleven.outbox_relays"
                  " WHERE slot_name IS NULL AND slot_mode IS NULL AND walsender_pid IS NULL"),
            1)
      << "migration 15: an older relay's row names no slot";
  // Migration 16: the SQL producer, numbering after the counter the old rows left.
  EXPECT_EQ(count(conn,
                  "SELECT aggregate_sequence FROM migrate_from_eleven.enqueue("
                  "'order', '1', 'Y', '{}')"),
            9);
}

// A migration whose DDL waits behind a writer's open transaction gives up after its lock timeout,
// changes nothing, and says what to do; once the writer is gone it applies. Waiting on would make
// every producer that comes after queue behind the migration's lock request.
TEST(Migrate, GivesUpOnALockItCannotGetAndChangesNothing) {
  const SchemaName schema("migrate_lock");
  auto connection = connect_without(schema);
  PGconn* conn = connection.get();
  migrate(conn, schema);
  // As a build before migration 7 left it (7 only redefines the trigger, so it can run again).
  pg::exec(conn, "DELETE FROM migrate_lock.outbox_schema_migrations WHERE version >= 7");
  pg::exec(conn,
           "DROP FUNCTION migrate_lock.enqueue, migrate_lock.outbox_check_name,"
           " migrate_lock.outbox_hostile_pattern, migrate_lock.outbox_kafka_header_bytes");
  pg::exec(conn,
           "ALTER TABLE migrate_lock.outbox_relays DROP COLUMN slot_name, DROP COLUMN slot_mode,"
           " DROP COLUMN walsender_pid, DROP COLUMN published, DROP COLUMN health");
  pg::exec(conn, "DROP TABLE migrate_lock.outbox_cleanup_horizon");
  pg::exec(conn, "DROP TABLE migrate_lock.outbox_table_less_slots");
  pg::exec(conn, "DROP FUNCTION migrate_lock.outbox_table_less_ready()");
  pg::exec(conn,
           "ALTER TABLE migrate_lock.outbox_relays DROP COLUMN lock_key, DROP COLUMN lease_ms,"
           " DROP COLUMN registered_at, DROP COLUMN ended_at, DROP COLUMN backend_pid");
  pg::exec(conn, "DROP TABLE migrate_lock.outbox_inbox_consumers");
  pg::exec(conn,
           "DROP TRIGGER outbox_aggregate_sequences_forward"
           " ON migrate_lock.outbox_aggregate_sequences");
  pg::exec(conn, "DROP FUNCTION migrate_lock.outbox_refuse_rewrite()");
  pg::exec(conn,
           "ALTER TABLE migrate_lock.outbox_operator_audit DROP COLUMN db_user,"
           " DROP COLUMN consumer_name");
  pg::exec(conn, "DROP TABLE migrate_lock.inbox_aggregates, migrate_lock.inbox_parked");
  pg::exec(conn,
           "ALTER TABLE migrate_lock.outbox_events DROP COLUMN in_doubt_at,"
           " DROP COLUMN in_doubt_reason");
  auto writer = connect();
  pg::exec(writer.get(), "BEGIN");
  pg::exec(writer.get(),
           "INSERT INTO migrate_lock.outbox_events (event_id, aggregate_type, aggregate_id,"
           " aggregate_sequence, event_type, payload) VALUES (gen_random_uuid(), 'order', '1', 1,"
           " 'X', '{}')");
  pg::exec(conn, "SET statement_timeout = '10s'");  // without the lock timeout: fail, not hang
  const auto started = std::chrono::steady_clock::now();
  try {
    migrate(conn, schema, std::chrono::milliseconds(200));
    ADD_FAILURE() << "migrate should give up while the writer holds its lock";
  } catch (const DatabaseError& e) {
    EXPECT_EQ(e.sqlstate(), "55P03");
    EXPECT_TRUE(e.retryable());
    EXPECT_NE(std::string(e.what()).find("left unchanged at version 6"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
  EXPECT_EQ(PQtransactionStatus(conn), PQTRANS_IDLE);
  EXPECT_EQ(count(conn, "SELECT max(version) FROM migrate_lock.outbox_schema_migrations"), 6);
  pg::exec(writer.get(), "COMMIT");
  const auto report = migrate(conn, schema, std::chrono::milliseconds(200));
  EXPECT_EQ(report.from_version, 6);
  EXPECT_EQ(report.to_version, latest_schema_version());
  EXPECT_THROW(migrate(conn, schema, std::chrono::milliseconds(-1)), InvalidArgument);
}

TEST(Migrate, ConcurrentCallersSerializeAndApplyOnce) {
  const SchemaName schema("migrate_race");
  connect_without(schema);
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
