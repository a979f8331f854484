// Least privilege: each role does its part's whole job and nothing else (SQLSTATE 42501).

#include <gtest/gtest.h>

#include "outbox/cleanup.hpp"
#include "outbox/discard_sink.hpp"
#include "outbox/inbox.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/roles.hpp"
#include "outbox/transaction.hpp"
#include "support/relay_fixture.hpp"

namespace outbox::testing {
namespace {

class RolesTest : public RelayFixture {
 protected:
  void SetUp() override {
    RelayFixture::SetUp();
    roles_ = create_roles(conn(), schema_);
  }
  // A connection acting as `role` (the test's superuser may become any role).
  pg::Connection as(const std::string& role) {
    return pg::Connection::open(database_url() + " options='-c role=" + role + "'");
  }
  // The SQLSTATE `sql` fails with on `c` ("" when it succeeds).
  static std::string refusal(PGconn* c, const std::string& sql) {
    try {
      pg::exec(c, sql);
    } catch (const DatabaseError& e) {
      return e.sqlstate();
    }
    return "";
  }
  std::string events() const { return schema_.table("outbox_events"); }
  // An event written by plain SQL, as only a writer may.
  std::string an_event_insert() const {
    return "INSERT INTO " + events() +
           " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, payload)"
           " VALUES (gen_random_uuid(), 'o', '1', 9, 'X', '{}')";
  }
  RoleNames roles_;
};

TEST_F(RolesTest, TheNamesFollowTheSchemaAndCreatingThemAgainChangesNothing) {
  EXPECT_EQ(roles_.writer, schema_.name() + "_writer");
  EXPECT_EQ(roles_.admin, schema_.name() + "_admin");
  EXPECT_NO_THROW(create_roles(conn(), schema_));
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM pg_roles WHERE rolname LIKE '" + schema_.name() +
                              "\\_%' AND NOT rolcanlogin"),
            4);
}

TEST_F(RolesTest, AWriterEnqueuesAndResolvesButReadsAndChangesNothingElse) {
  auto writer = as(roles_.writer);
  const Producer producer(ProducerOptions{schema_, 4096});
  pg::exec(writer.get(), "BEGIN");
  const auto enqueued =
      producer.enqueue(writer.get(), NewEvent{"order", "1", "Placed", "{}", "{}", 1, {}});
  pg::commit(writer.get());
  EXPECT_EQ(enqueued.aggregate_sequence, 1);
  EXPECT_EQ(resolve_commit(writer.get(), schema_, enqueued.transaction_id, enqueued.event_id),
            TransactionStatus::committed);
  EXPECT_EQ(refusal(writer.get(), "SELECT payload FROM " + events()), "42501");
  EXPECT_EQ(refusal(writer.get(), "UPDATE " + events() + " SET published_at = now()"), "42501");
  EXPECT_EQ(refusal(writer.get(), "DELETE FROM " + events()), "42501");
  EXPECT_EQ(refusal(writer.get(), "DELETE FROM " + schema_.table("outbox_relays")), "42501");
  EXPECT_EQ(refusal(writer.get(), "SELECT * FROM " + schema_.table("processed_events")), "42501");
  EXPECT_EQ(refusal(writer.get(), "DROP TABLE " + events()), "42501");
}

// A relay may insert events since table-less producers (it writes a table-less event it cannot
// publish at once into the table); it deletes none, numbers none and reads no inbox.
TEST_F(RolesTest, ARelayPublishesButDeletesNoEventAndReadsNoInbox) {
  enqueue(3, 2);
  RelayOptions o = options("roles-relay");
  o.database_url = database_url() + " options='-c role=" + roles_.relay + "'";
  Relay relay(o, make_discard_sink());
  ASSERT_TRUE(relay.run_until_idle(20s));
  EXPECT_EQ(relay.stats().published, 6U);
  EXPECT_EQ(unpublished(), 0);
  auto as_relay = as(roles_.relay);
  EXPECT_EQ(refusal(as_relay.get(), "DELETE FROM " + events()), "42501");
  EXPECT_EQ(refusal(as_relay.get(), "DELETE FROM " + schema_.table("outbox_table_less_slots")),
            "42501");
  EXPECT_EQ(refusal(as_relay.get(), "SELECT * FROM " + schema_.table("processed_events")), "42501");
  EXPECT_EQ(refusal(as_relay.get(), "UPDATE " + schema_.table("outbox_aggregate_sequences") +
                                        " SET last_sequence = 1"),
            "42501");
}

TEST_F(RolesTest, AnInboxRecordsIdsAndSeesNoEvents) {
  auto inbox_connection = as(roles_.inbox);
  const Inbox inbox(schema_, "billing");
  const EventId id = EventId::generate();
  EXPECT_EQ(inbox.process(inbox_connection.get(), id, [](PGconn*) {}), InboxResult::applied);
  EXPECT_EQ(inbox.process(inbox_connection.get(), id, [](PGconn*) {}), InboxResult::duplicate);
  EXPECT_EQ(refusal(inbox_connection.get(), "SELECT * FROM " + events()), "42501");
  EXPECT_EQ(refusal(inbox_connection.get(), "DELETE FROM " + schema_.table("processed_events")),
            "42501");
}

TEST_F(RolesTest, AnAdminOperatesButNeitherWritesEventsNorChangesTheSchema) {
  const auto ids = enqueue(1, 2);
  pg::exec(conn(), "UPDATE " + events() +
                       " SET quarantined_at = now(), quarantine_reason = 'r', available_at = "
                       "'infinity' WHERE aggregate_sequence = 1");
  pg::exec(conn(), "UPDATE " + events() +
                       " SET published_at = now() - interval '2 hours' WHERE aggregate_sequence "
                       "= 2");
  auto admin = as(roles_.admin);
  EXPECT_EQ(list_quarantined(admin.get(), schema_).size(), 1U);
  EXPECT_EQ(retry_quarantined(admin.get(), schema_, std::vector<EventId>{ids[0]}, "ops"), 1U);
  CleanupOptions cleanup_options;
  cleanup_options.schema = schema_;
  cleanup_options.retention = std::chrono::hours(1);
  cleanup_options.inbox_retention = std::chrono::hours(1);
  EXPECT_EQ(cleanup(admin.get(), cleanup_options).events_deleted, 1U);
  EXPECT_EQ(refusal(admin.get(), an_event_insert()), "42501");
  EXPECT_EQ(refusal(admin.get(), "DROP TABLE " + events()), "42501");
  EXPECT_EQ(refusal(admin.get(), "ALTER TABLE " + events() + " ADD COLUMN x int"), "42501");
}

}  // namespace
}  // namespace outbox::testing
