// Least privilege: each role does its part's whole job and nothing else (SQLSTATE 42501).

#include <gtest/gtest.h>

#include "outbox/cleanup.hpp"
#include "outbox/discard_sink.hpp"
#include "outbox/inbox.hpp"
#include "outbox/inbox_admin.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/replay.hpp"
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

  // The SQL producer (migration 16) with the writer's own rights; no other role may call it.
  const std::string call =
      "SELECT * FROM " + schema_.quoted() + ".enqueue('order', '1', 'Paid', '{}')";
  EXPECT_EQ(refusal(writer.get(), call), "");
  EXPECT_EQ(count(conn(),
                  "SELECT max(aggregate_sequence) FROM " + events() + " WHERE aggregate_id = '1'"),
            2)
      << "after the C++ producer's event of the same aggregate";
  for (const std::string* other : {&roles_.relay, &roles_.inbox, &roles_.admin}) {
    auto stranger = as(*other);
    EXPECT_EQ(refusal(stranger.get(), call), "42501") << *other;
  }
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

TEST_F(RolesTest, AGapAwareInboxHoldsAndAppliesAndTheAdminDecidesButRewritesNothing) {
  auto inbox_connection = as(roles_.inbox);
  InboxOrdering ordering;
  ordering.enabled = true;
  const Inbox inbox(schema_, "projection", ordering);
  ConsumedEvent e1, e2;
  for (ConsumedEvent* e : {&e1, &e2}) {
    e->event_id = EventId::generate();
    e->aggregate_type = "order";
    e->aggregate_id = "1";
    e->event_type = "X";
  }
  e1.aggregate_sequence = 1;
  e2.aggregate_sequence = 2;
  const auto nothing = [](PGconn*, const ConsumedEvent&) {};
  EXPECT_EQ(inbox.process_in_order(inbox_connection.get(), std::vector{e2}, nothing).results,
            std::vector{InboxResult::held});
  auto admin = as(roles_.admin);
  ASSERT_EQ(list_held(admin.get(), schema_).size(), 1U);
  decide_held(admin.get(), schema_, "projection", e2.event_id, HeldDecision::release, "ops", "");
  EXPECT_EQ(inbox.carry_out_decisions(inbox_connection.get(), nothing).decided, 1U);
  EXPECT_EQ(inbox.process_in_order(inbox_connection.get(), std::vector{e1}, nothing).results,
            std::vector{InboxResult::duplicate});
  // A held event parked in place, and a release whose effect fails again withdrawn, by the
  // inbox role.
  ConsumedEvent e4 = e2, e5 = e2;
  e4.event_id = EventId::generate();
  e4.aggregate_sequence = 4;
  e5.event_id = EventId::generate();
  e5.aggregate_sequence = 5;
  inbox.process_in_order(inbox_connection.get(), std::vector{e4, e5}, nothing);  // 3 is missing
  ConsumedEvent e3 = e2;
  e3.event_id = EventId::generate();
  e3.aggregate_sequence = 3;
  EXPECT_EQ(inbox
                .process_in_order(inbox_connection.get(), std::vector{e3}, nothing,
                                  {{e4.event_id, ParkRequest{"failed 10 times"}}})
                .parked,
            std::vector{e4.event_id});
  decide_held(admin.get(), schema_, "projection", e4.event_id, HeldDecision::release, "ops", "");
  EXPECT_THROW(inbox.carry_out_decisions(inbox_connection.get(),
                                         [](PGconn*, const ConsumedEvent&) {
                                           throw std::runtime_error("still failing");
                                         }),
               std::runtime_error);
  EXPECT_EQ(list_held(admin.get(), schema_, "projection").front().reason,
            "released, and its effect failed again: still failing");
  const std::string parked = schema_.table("inbox_parked");
  EXPECT_EQ(refusal(admin.get(), "UPDATE " + parked + " SET payload = 'x'"), "42501");
  EXPECT_EQ(refusal(admin.get(), "DELETE FROM " + parked), "42501");
  EXPECT_EQ(refusal(admin.get(),
                    "UPDATE " + schema_.table("inbox_aggregates") + " SET last_sequence = 0"),
            "42501");
  EXPECT_EQ(refusal(inbox_connection.get(), "UPDATE " + parked + " SET payload = 'x'"), "42501");
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_operator_audit") +
                              " WHERE action = 'inbox_release' AND consumer_name = 'projection'"),
            2);
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

// Issue 23, item 10: what each role could rewrite of history before its grants were cut to the
// columns its program writes (and migration 13's triggers). Every attempt is refused with 42501.
TEST_F(RolesTest, AWriterCanNeitherRewindACounterNorInsertAClaimedOrPublishedRow) {
  auto writer = as(roles_.writer);
  const Producer producer(ProducerOptions{schema_, 4096});
  for (int i = 0; i < 3; ++i) {
    pg::exec(writer.get(), "BEGIN");
    producer.enqueue(writer.get(), NewEvent{"order", "71", "Placed", "{}", "{}", 1, {}});
    pg::commit(writer.get());
  }
  const std::string sequences = schema_.table("outbox_aggregate_sequences");
  EXPECT_EQ(refusal(writer.get(), "UPDATE " + sequences + " SET last_sequence = 1"), "42501");
  EXPECT_EQ(refusal(writer.get(), "UPDATE " + sequences + " SET aggregate_id = 'x'"), "42501");
  EXPECT_EQ(
      refusal(writer.get(), "INSERT INTO " + events() +
                                " (event_id, aggregate_type, aggregate_id, aggregate_sequence,"
                                " event_type, payload, claimed_by, claim_until) VALUES"
                                " (gen_random_uuid(), 'o', '2', 1, 'X', '{}', 'ghost',"
                                " 'infinity')"),
      "42501");
  EXPECT_EQ(
      refusal(writer.get(), "INSERT INTO " + events() +
                                " (event_id, aggregate_type, aggregate_id, aggregate_sequence,"
                                " event_type, payload, published_at) VALUES"
                                " (gen_random_uuid(), 'o', '3', 1, 'X', '{}', now())"),
      "42501");
  EXPECT_EQ(
      refusal(writer.get(), "INSERT INTO " + events() +
                                " (event_id, aggregate_type, aggregate_id, aggregate_sequence,"
                                " event_type, payload, attempt_count) VALUES"
                                " (gen_random_uuid(), 'o', '4', 1, 'X', '{}', 99)"),
      "42501");
  // Not even the owner lowers a counter (the trigger refuses whoever asks).
  EXPECT_EQ(refusal(conn(), "UPDATE " + sequences + " SET last_sequence = 1"), "42501");
  pg::exec(writer.get(), "BEGIN");
  EXPECT_EQ(producer.enqueue(writer.get(), NewEvent{"order", "71", "Placed", "{}", "{}", 1, {}})
                .aggregate_sequence,
            4);
  pg::commit(writer.get());
}

TEST_F(RolesTest, ARelayChangesClaimsAndMarksButNoPayload) {
  enqueue(1, 1);
  auto relay = as(roles_.relay);
  EXPECT_EQ(refusal(relay.get(), "UPDATE " + events() + " SET payload = '{\"forged\":1}'"),
            "42501");
  EXPECT_EQ(refusal(relay.get(), "UPDATE " + events() + " SET headers = '{}', event_type = 'Y'"),
            "42501");
  EXPECT_EQ(refusal(relay.get(), "UPDATE " + events() + " SET aggregate_sequence = 5"), "42501");
  EXPECT_EQ(refusal(relay.get(), "UPDATE " + events() + " SET claim_until = now()"), "");
}

// Consumer names are not bound to roles by themselves (roles are per program): a name listed in
// outbox_inbox_consumers belongs to its role, and another inbox login neither marks events done
// under it nor sees its rows. An unlisted name stays open.
TEST_F(RolesTest, AnInboxLoginMarksEventsOnlyUnderItsOwnListedConsumerName) {
  for (const char* login : {"roles_billing_login", "roles_shipping_login"}) {
    pg::exec(conn(), std::string("DO $$ BEGIN CREATE ROLE ") + login +
                         "; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
    pg::exec(conn(), "GRANT \"" + roles_.inbox + "\" TO " + login);
  }
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_inbox_consumers") +
                       " VALUES ('billing', 'roles_billing_login')");
  auto billing = as("roles_billing_login");
  auto shipping = as("roles_shipping_login");
  const EventId id = EventId::generate();
  EXPECT_EQ(Inbox(schema_, "billing").process(billing.get(), id, [](PGconn*) {}),
            InboxResult::applied);
  EXPECT_EQ(Inbox(schema_, "shipping").process(shipping.get(), id, [](PGconn*) {}),
            InboxResult::applied)
      << "an unlisted name stays open";
  const std::string processed = schema_.table("processed_events");
  EXPECT_EQ(refusal(shipping.get(), "INSERT INTO " + processed + " VALUES ('billing', '" +
                                        EventId::generate().to_string() + "')"),
            "42501");
  EXPECT_THROW(
      Inbox(schema_, "billing").process(shipping.get(), EventId::generate(), [](PGconn*) {}),
      DatabaseError);
  EXPECT_EQ(count(shipping.get(),
                  "SELECT count(*) FROM " + processed + " WHERE consumer_name = 'billing'"),
            0);
  // A name listed for a role that does not exist admits nobody.
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_inbox_consumers") +
                       " VALUES ('orphaned', 'roles_no_such_role')");
  EXPECT_EQ(refusal(shipping.get(), "INSERT INTO " + processed + " VALUES ('orphaned', '" +
                                        EventId::generate().to_string() + "')"),
            "42501");
  EXPECT_EQ(refusal(shipping.get(), "INSERT INTO " + schema_.table("outbox_inbox_consumers") +
                                        " VALUES ('x', 'roles_shipping_login')"),
            "42501");
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + processed), 2);
  // The admin's cleanup still sees every consumer's rows.
  auto admin = as(roles_.admin);
  EXPECT_EQ(count(admin.get(), "SELECT count(*) FROM " + processed), 2);
  // A role's name is matched as written: mixed case and a '.' were folded, or failed, when the
  // policy parsed it as an identifier.
  pg::exec(conn(),
           "DO $$ BEGIN CREATE ROLE \"Roles_Mixed.Login\"; EXCEPTION WHEN "
           "duplicate_object THEN NULL; END $$");
  pg::exec(conn(), "GRANT \"" + roles_.inbox + "\" TO \"Roles_Mixed.Login\"");
  pg::exec(conn(), "INSERT INTO " + schema_.table("outbox_inbox_consumers") +
                       " VALUES ('mixed', 'Roles_Mixed.Login')");
  auto mixed = as("Roles_Mixed.Login");
  EXPECT_EQ(refusal(mixed.get(), "INSERT INTO " + processed + " VALUES ('mixed', '" +
                                     EventId::generate().to_string() + "')"),
            "");
  EXPECT_EQ(refusal(shipping.get(), "INSERT INTO " + processed + " VALUES ('mixed', '" +
                                        EventId::generate().to_string() + "')"),
            "42501");
}

TEST_F(RolesTest, AnAdminRewritesNoPayloadForgesNoAuditLoginAndMovesTheHorizonOnlyForward) {
  const auto ids = enqueue(1, 1);
  pg::exec(conn(), "UPDATE " + events() +
                       " SET quarantined_at = now(), quarantine_reason = 'r', available_at = "
                       "'infinity'");
  auto admin = as(roles_.admin);
  EXPECT_EQ(refusal(admin.get(), "UPDATE " + events() + " SET payload = '{\"forged\":1}'"),
            "42501");
  EXPECT_EQ(refusal(admin.get(), "UPDATE " + events() + " SET headers = '{}'"), "42501");
  const std::string audit = schema_.table("outbox_operator_audit");
  EXPECT_EQ(refusal(admin.get(), "INSERT INTO " + audit +
                                     " (event_id, action, actor, reason, db_user) VALUES ('" +
                                     ids[0].to_string() + "', 'skip', 'alice', 'r', 'alice')"),
            "42501");
  EXPECT_EQ(refusal(admin.get(), "INSERT INTO " + audit + " (event_id, action, actor, reason, at)" +
                                     " VALUES ('" + ids[0].to_string() +
                                     "', 'skip', 'alice', 'r', now() - interval '1 year')"),
            "42501");
  EXPECT_EQ(retry_quarantined(admin.get(), schema_, std::vector<EventId>{ids[0]}, "ops"), 1U);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + audit +
                              " WHERE actor = 'ops' AND db_user = session_user"),
            1)
      << "an audit row names the login that wrote it";
  // Replay, too, needs nothing beyond the admin's columns.
  pg::exec(conn(), "UPDATE " + events() + " SET published_at = now() - interval '2 hours'");
  EXPECT_EQ(replay_published(admin.get(), schema_, ReplayFilter{"-infinity", "", {}, {}, {}}, "ops",
                             "INC-1")
                .replayed.size(),
            1U);
  pg::exec(conn(), "UPDATE " + events() + " SET published_at = now() - interval '2 hours'");

  CleanupOptions cleanup_options;
  cleanup_options.schema = schema_;
  cleanup_options.retention = std::chrono::hours(1);
  cleanup(admin.get(), cleanup_options);
  const std::string horizon = schema_.table("outbox_cleanup_horizon");
  ASSERT_EQ(count(conn(), "SELECT count(*) FROM " + horizon), 1);
  EXPECT_EQ(refusal(admin.get(), "UPDATE " + horizon + " SET deleted_before = '-infinity'"),
            "42501");
  EXPECT_EQ(
      refusal(admin.get(), "UPDATE " + horizon + " SET deleted_before = now() + interval '1 day'"),
      "42501");
  EXPECT_EQ(refusal(admin.get(), "DELETE FROM " + horizon), "42501");
  EXPECT_EQ(refusal(conn(), "UPDATE " + horizon + " SET deleted_before = '-infinity'"), "42501")
      << "not even the owner moves it back";
  cleanup(admin.get(), cleanup_options);  // the next cleanup still raises it
}

}  // namespace
}  // namespace outbox::testing
