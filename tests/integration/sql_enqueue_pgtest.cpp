// The producer as a SQL function, <schema>.enqueue() (migration 16;
// src/schema/enqueue_function.hpp): what it writes, that it shares the C++ producer's sequence
// without gaps, that it refuses what the producer refuses in the same words and at the same size to
// the byte, the NOTIFY rule, and synchronous_commit.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "outbox/producer.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

class SqlEnqueueTest : public ::testing::Test {
 protected:
  void SetUp() override { schema_ = fresh_schema(); }
  PGconn* conn() { return connection_.get(); }

  // "SELECT * FROM <schema>.enqueue(<arguments>)": the id and the sequence.
  std::pair<std::string, std::int64_t> enqueue(PGconn* c, const std::string& arguments,
                                               const std::vector<const char*>& params = {}) {
    const auto row = pg::exec(c,
                              "SELECT event_id::text, aggregate_sequence FROM " + schema_.quoted() +
                                  ".enqueue(" + arguments + ")",
                              params);
    return {std::string(row.text(0, 0)), row.int64(0, 1)};
  }
  // The message the call fails with (its SQLSTATE must be 22023), or "" when it succeeds. The
  // call runs in a savepoint of an open transaction.
  std::string sql_refusal(const std::string& arguments,
                          const std::vector<const char*>& params = {}) {
    pg::exec(conn(), "SAVEPOINT refusal");
    try {
      enqueue(conn(), arguments, params);
    } catch (const DatabaseError& e) {
      pg::exec(conn(), "ROLLBACK TO SAVEPOINT refusal");
      EXPECT_EQ(e.sqlstate(), "22023") << e.what();
      return e.what();
    }
    pg::exec(conn(), "RELEASE SAVEPOINT refusal");
    return "";
  }
  // What the C++ producer says of `event` ("" when it takes it).
  std::string cpp_refusal(const NewEvent& event, std::size_t max_bytes = 900 * 1024) {
    try {
      Producer(ProducerOptions{schema_, max_bytes}).validate(event);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  }
  std::vector<std::int64_t> sequences(const std::string& aggregate_id) {
    return sequences_of(conn(), schema_, aggregate_id);
  }

  pg::Connection connection_ = connect();
  SchemaName schema_;
};

TEST_F(SqlEnqueueTest, WritesTheEventAsTheProducerDoes) {
  pg::exec(conn(), "BEGIN");
  const auto [id, sequence] =
      enqueue(conn(),
              "'order', 'o-1', 'OrderPlaced', '{\"total\": 42}', '{\"trace_id\": \"abc\"}', 3,"
              " traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'");
  pg::commit(conn());
  EXPECT_EQ(sequence, 1);
  const std::optional<EventId> parsed = EventId::parse(id);
  ASSERT_TRUE(parsed) << id;
  EXPECT_EQ(parsed->version(), 7);
  EXPECT_EQ(parsed->bytes()[8] >> 6, 2) << "the RFC 9562 variant";
  // The first 48 bits are the Unix time in milliseconds (resolve_commit and cleanup read them).
  std::int64_t id_ms = 0;
  for (int i = 0; i < 6; ++i) id_ms = (id_ms << 8) | parsed->bytes()[i];
  const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  EXPECT_NEAR(static_cast<double>(id_ms), static_cast<double>(now_ms), 5000.0);
  const auto row = pg::exec(conn(),
                            "SELECT aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                            " schema_version, payload->>'total', headers->>'trace_id',"
                            " headers->>'traceparent', available_at <= now(), published_at IS NULL"
                            " FROM " +
                                schema_.table("outbox_events") + " WHERE event_id = $1",
                            {id.c_str()});
  ASSERT_EQ(row.rows(), 1);
  EXPECT_EQ(row.text(0, 0), "order");
  EXPECT_EQ(row.text(0, 1), "o-1");
  EXPECT_EQ(row.int64(0, 2), 1);
  EXPECT_EQ(row.text(0, 3), "OrderPlaced");
  EXPECT_EQ(row.int64(0, 4), 3);
  EXPECT_EQ(row.text(0, 5), "42");
  EXPECT_EQ(row.text(0, 6), "abc");
  EXPECT_EQ(row.text(0, 7), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(row.text(0, 8), "t");
  EXPECT_EQ(row.text(0, 9), "t");

  // A given id is kept: a retried request with the same id is refused, not written twice.
  const std::string again = "'order', 'o-1', 'OrderPlaced', '{}', event_id => '" + id + "'";
  try {
    enqueue(conn(), again);
    FAIL() << "the same event id twice";
  } catch (const DatabaseError& e) {
    EXPECT_EQ(e.sqlstate(), "23505") << e.what();
  }
  // An empty traceparent is none, as for the C++ producer.
  const auto untraced = enqueue(conn(), "'order', 'o-3', 'E', '{}', traceparent => ''");
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM " + schema_.table("outbox_events") +
                      " WHERE event_id = $1 AND NOT headers ? 'traceparent'",
                  {untraced.first.c_str()}),
            1);
  // A delay sets available_at.
  const auto delayed =
      enqueue(conn(), "'order', 'o-2', 'Reminder', '{}', deliver_after => '1 hour'");
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM " + schema_.table("outbox_events") +
                      " WHERE event_id = $1 AND available_at > now() + interval '59 minutes'",
                  {delayed.first.c_str()}),
            1);
}

// Both producers take the same counter row under the same lock: interleaved on one aggregate,
// with rollbacks on both sides and from two sessions at once, the sequences are 1..N.
TEST_F(SqlEnqueueTest, InterleavesWithTheCppProducerOnOneAggregateWithoutGaps) {
  const Producer producer(ProducerOptions{schema_, 900 * 1024});
  const NewEvent cpp_event{"order", "shared", "ByCpp", "{}", "{}", 1, std::nullopt};
  const std::string sql_event = "'order', 'shared', 'BySql', '{}'";
  std::atomic<int> committed{0};
  const auto writer = [&](bool sql, unsigned seed) {
    pg::Connection c = connect();
    std::mt19937 random(seed);
    for (int i = 0; i < 150; ++i) {
      pg::exec(c.get(), "BEGIN");
      if (sql) {
        enqueue(c.get(), sql_event);
      } else {
        producer.enqueue(c.get(), std::vector<NewEvent>{cpp_event, cpp_event});
      }
      if (random() % 4 == 0) {
        pg::exec(c.get(), "ROLLBACK");
        continue;
      }
      pg::commit(c.get());
      committed += sql ? 1 : 2;
    }
  };
  std::thread by_sql(writer, true, 1U);
  std::thread by_cpp(writer, false, 2U);
  by_sql.join();
  by_cpp.join();
  const std::vector<std::int64_t> got = sequences("shared");
  ASSERT_EQ(got.size(), static_cast<std::size_t>(committed.load()));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<std::int64_t>(i + 1)) << "a gap or a repeat at " << i;
  }
  EXPECT_GT(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE event_type = 'BySql'"),
            0);
  EXPECT_GT(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                              " WHERE event_type = 'ByCpp'"),
            0);
}

// Each refusal of the C++ producer, made through both: the SQL function refuses with SQLSTATE
// 22023 and the producer's words, and writes nothing.
TEST_F(SqlEnqueueTest, RefusesWhatTheProducerRefusesInTheSameWords) {
  struct Case {
    NewEvent event;
    std::string sql;
    std::string words;  // in both messages
  };
  const auto event = [](std::string type, std::string id, std::string kind) {
    return NewEvent{std::move(type), std::move(id), std::move(kind), "{}", "{}", 1, std::nullopt};
  };
  std::vector<Case> cases = {
      {event("", "1", "E"), "'', '1', 'E', '{}'", "aggregate_type is empty; every event needs one"},
      {event("o", "1", std::string(256, 'e')), "'o', '1', repeat('e', 256), '{}'",
       "event_type is 256 bytes; at most 255 are allowed"},
      {event("o", "c-1\x1b[31m", "E"), "'o', E'c-1\\x1b[31m', 'E', '{}'",
       "contains the control character U+001B at byte 3, which terminals"},
      {event("o", "a\xe2\x80\xae", "E"), "'o', E'a\\u202e', 'E', '{}'",
       "contains the bidirectional control U+202E at byte 1"},
      {event("o", "a", "E\xc2\x85"), "'o', 'a', E'E\\u0085', '{}'",
       "contains the control character U+0085 at byte 1"},
      // Two problems at once: the first in the producer's order is named by both.
      {event("", "1", ""), "'', '1', '', '{}'", "aggregate_type is empty"},
  };
  Case version{event("o", "1", "E"), "'o', '1', 'E', '{}', schema_version => 0",
               "schema_version is 0; it must be 1 or more"};
  version.event.schema_version = 0;
  cases.push_back(version);
  Case not_object{event("o", "1", "E"), "'o', '1', 'E', '{}', '[]'",
                  "headers of E 1 must be a JSON object"};
  not_object.event.headers = "[]";
  cases.push_back(not_object);
  Case not_string{event("o", "1", "E"), "'o', '1', 'E', '{}', '{\"n\": 5}'",
                  "headers of E 1 value of \"n\" must be a string"};
  not_string.event.headers = R"({"n": 5})";
  cases.push_back(not_string);
  Case empty_key{event("o", "1", "E"), "'o', '1', 'E', '{}', '{\"\": \"x\"}'",
                 "headers of E 1 has an empty key"};
  empty_key.event.headers = R"({"": "x"})";
  cases.push_back(empty_key);
  Case reserved{event("o", "1", "E"), "'o', '1', 'E', '{}', '{\"event_id\": \"x\"}'",
                "uses the reserved name \"event_id\": outbox sets it from the event itself"};
  reserved.event.headers = R"({"event_id": "x"})";
  cases.push_back(reserved);
  // Headers are looked at bytewise by key, not in jsonb's order (shorter keys first).
  Case two_headers{event("o", "1", "E"), "'o', '1', 'E', '{}', '{\"zz\": 1, \"event_id\": \"x\"}'",
                   "uses the reserved name \"event_id\""};
  two_headers.event.headers = R"({"zz": 1, "event_id": "x"})";
  cases.push_back(two_headers);
  Case bad_trace{event("o", "1", "E"), "'o', '1', 'E', '{}', traceparent => 'ff-x'",
                 "it must be a W3C trace context such as"};
  bad_trace.event.traceparent = "ff-x";
  cases.push_back(bad_trace);
  const std::string trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  Case two_traces{event("o", "1", "E"),
                  "'o', '1', 'E', '{}', '{\"traceparent\": \"x\"}', traceparent => '" + trace + "'",
                  "has a traceparent and a different \"traceparent\" header; give one of them"};
  two_traces.event.headers = R"({"traceparent": "x"})";
  two_traces.event.traceparent = trace;
  cases.push_back(two_traces);
  Case nil{event("o", "1", "E"),
           "'o', '1', 'E', '{}', event_id => '00000000-0000-0000-0000-000000000000'",
           "event_id is the nil UUID; leave it unset to get a fresh UUIDv7"};
  nil.event.event_id = EventId{};
  cases.push_back(nil);
  Case late{event("o", "1", "E"), "'o', '1', 'E', '{}', deliver_after => '-1 second'",
            "it must be from 0 to 365 days"};
  late.event.deliver_after = std::chrono::milliseconds(-1000);
  cases.push_back(late);
  Case too_late{event("o", "1", "E"), "'o', '1', 'E', '{}', deliver_after => '366 days'",
                "it must be from 0 to 365 days"};
  too_late.event.deliver_after = std::chrono::hours(24 * 366);
  cases.push_back(too_late);

  pg::exec(conn(), "BEGIN");
  for (const Case& c : cases) {
    const std::string cpp = cpp_refusal(c.event);
    const std::string sql = sql_refusal(c.sql);
    EXPECT_NE(cpp.find(c.words), std::string::npos) << "C++: " << cpp;
    EXPECT_NE(sql.find(c.words), std::string::npos) << "SQL: " << sql;
    EXPECT_EQ(sql.find('\x1b'), std::string::npos) << "a hostile name is not echoed: " << sql;
  }
  // A delay is measured on the calendar: 12 months and 5 days is more than 365 days.
  EXPECT_NE(sql_refusal("'o', '1', 'E', '{}', deliver_after => '12 months 5 days'")
                .find("it must be from 0 to 365 days"),
            std::string::npos);
  pg::commit(conn());
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events")), 0);
  EXPECT_EQ(count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_aggregate_sequences")),
            0);
}

// The message size the Kafka sink will send, counted the same way: with headers, a traceparent
// and multi-byte text, the largest payload the C++ producer takes is the largest the function
// takes, one more byte is refused by both, and the setting moves the limit as the option does.
TEST_F(SqlEnqueueTest, TakesTheSamePayloadsAsTheProducerToTheByte) {
  constexpr std::size_t kLimit = 3000;
  const std::string trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  struct Shape {
    std::string headers;
    std::string traceparent;
    std::string aggregate_id;
  };
  const std::vector<Shape> shapes = {
      {"{}", "", "o-1"},
      {R"({"tenant": "acme", "r\u00e9gion": "\u00e9u-west"})", trace, "commande-\xc3\xa9t\xc3\xa9"},
      {R"({"long": ")" + std::string(200, 'h') + R"("})", "", std::string(200, 'k')},
  };
  pg::exec(conn(), "BEGIN");
  pg::exec(conn(), "SET LOCAL outbox.max_message_bytes = " + std::to_string(kLimit));
  for (const Shape& shape : shapes) {
    const auto made = [&](std::size_t n) {
      NewEvent e{
          "order",       shape.aggregate_id,
          "Placed",      R"({"note": ")" + std::string(n, 'x') + R"(", "city": "K\u00f6ln"})",
          shape.headers, 12,
          std::nullopt};
      e.traceparent = shape.traceparent;
      return e;
    };
    // The largest n the producer takes.
    std::size_t largest = 0;
    while (cpp_refusal(made(largest + 1), kLimit).empty()) ++largest;
    ASSERT_GT(largest, 100U) << "the shape leaves room for a payload";
    ASSERT_NE(cpp_refusal(made(largest + 1), kLimit).find("would be a message of"),
              std::string::npos);
    const auto refusal_of = [&](std::size_t n) {
      const NewEvent e = made(n);
      return sql_refusal(
          "$1, $2, 'Placed', $3::jsonb, $4::jsonb, 12, traceparent => $5",
          {e.aggregate_type.c_str(), e.aggregate_id.c_str(), e.payload.c_str(), e.headers.c_str(),
           e.traceparent.empty() ? nullptr : e.traceparent.c_str()});
    };
    EXPECT_EQ(refusal_of(largest), "") << "headers " << shape.headers;
    const std::string refused = refusal_of(largest + 1);
    EXPECT_NE(refused.find("would be a message of " + std::to_string(kLimit + 1) + " bytes"),
              std::string::npos)
        << refused;
    EXPECT_NE(refused.find("the limit is " + std::to_string(kLimit)), std::string::npos) << refused;
  }
  pg::commit(conn());
}

// The NOTIFY rule of the C++ producer: relays are woken only when every live one listens.
TEST_F(SqlEnqueueTest, WakesRelaysOnlyWhenEveryLiveOneListens) {
  pg::Connection listener = connect();
  listener.listen('"' + schema_.notify_channel() + '"');
  const std::string relays = schema_.table("outbox_relays");
  const auto notified_after_commit = [&](const std::string& aggregate) {
    pg::exec(conn(), "BEGIN");
    enqueue(conn(), "'order', '" + aggregate + "', 'E', '{}'");
    // The function decided, not the table's trigger (which decides by the same rule when no
    // producer has): it recorded so for the trigger.
    EXPECT_EQ(pg::exec(conn(), "SELECT current_setting('outbox.wake_checked', true)").text(0, 0),
              schema_.notify_channel());
    pg::commit(conn());
    return listener.wait_for_notifications(std::chrono::milliseconds(500)) > 0;
  };
  pg::exec(conn(), "INSERT INTO " + relays + " (relay_id, listening) VALUES ('r:1', true)");
  EXPECT_TRUE(notified_after_commit("a")) << "the only relay listens: wake it";
  pg::exec(conn(), "INSERT INTO " + relays + " (relay_id, listening) VALUES ('r:2', false)");
  EXPECT_FALSE(notified_after_commit("b")) << "a relay is awake and finds the event itself";
  pg::exec(conn(), "UPDATE " + relays +
                       " SET seen_at = now() - interval '1 minute'"
                       " WHERE relay_id = 'r:2'");
  EXPECT_TRUE(notified_after_commit("c")) << "the awake one was not seen for a minute";
}

// A session with synchronous_commit off would let a crash lose a commit the relay published: the
// call raises it to on for its transaction only.
TEST_F(SqlEnqueueTest, RaisesSynchronousCommitForItsTransactionOnly) {
  pg::exec(conn(), "SET synchronous_commit = off");
  pg::exec(conn(), "BEGIN");
  enqueue(conn(), "'order', 'o-1', 'E', '{}'");
  EXPECT_EQ(pg::exec(conn(), "SHOW synchronous_commit").text(0, 0), "on");
  pg::commit(conn());
  EXPECT_EQ(pg::exec(conn(), "SHOW synchronous_commit").text(0, 0), "off");
  pg::exec(conn(), "SET synchronous_commit = remote_apply");
  pg::exec(conn(), "BEGIN");
  enqueue(conn(), "'order', 'o-1', 'E', '{}'");
  EXPECT_EQ(pg::exec(conn(), "SHOW synchronous_commit").text(0, 0), "remote_apply")
      << "a stronger setting is kept";
  pg::commit(conn());
}

}  // namespace
}  // namespace outbox::testing
