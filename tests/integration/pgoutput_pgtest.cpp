// The pgoutput decoder against PostgreSQL 15 itself: a publication on a table, a logical slot
// with the pgoutput plugin, changes and pg_logical_emit_message calls, then every row of
// pg_logical_slot_peek_binary_changes (one pgoutput message each) decoded and compared with what
// was written. A last test streams the same over a replication connection (START_REPLICATION), so
// the CopyData framing and the standby status update meet a real walsender.
//
// The embedded cluster runs with wal_level=logical (src/pg/embedded_postgres.cpp).
// OUTBOX_PGOUTPUT_DUMP=1 prints every message's bytes in hex: the fixtures of
// tests/unit/pgoutput_test.cpp were captured that way.

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cdc/pgoutput.hpp"
#include "support/pgoutput_writer.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;
using cdc::Lsn;
using cdc::PgOutputMessage;

std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return bytes;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const char c : bytes) {
    hex.push_back(kDigits[static_cast<unsigned char>(c) >> 4U]);
    hex.push_back(kDigits[static_cast<unsigned char>(c) & 0xFU]);
  }
  return hex;
}

Lsn parse_lsn(const std::string& text) {
  const std::size_t slash = text.find('/');
  return (std::stoull(text.substr(0, slash), nullptr, 16) << 32U) |
         std::stoull(text.substr(slash + 1), nullptr, 16);
}

bool dumping() { return std::getenv("OUTBOX_PGOUTPUT_DUMP") != nullptr; }

void dump(std::string_view label, std::string_view bytes) {
  if (dumping()) std::printf("pgoutput %s %s\n", std::string(label).c_str(), to_hex(bytes).c_str());
}

// One row of pg_logical_slot_peek_binary_changes.
struct Change {
  Lsn lsn = 0;
  std::uint32_t xid = 0;
  std::string data;
};

using cdc::wire::kind_of;

std::string kinds_of(const std::vector<PgOutputMessage>& messages) {
  std::string kinds;
  for (const auto& message : messages) kinds.push_back(kind_of(message));
  return kinds;
}

// A fresh schema, a publication and a pgoutput slot of the test's own, dropped at the end.
class PgoutputTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // A walsender that just lost its client may hold the slot a moment longer.
    for (int attempt = 0; attempt < 100; ++attempt) {
      try {
        exec(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = '" +
            slot_ + "'");
        break;
      } catch (const DatabaseError&) {
        std::this_thread::sleep_for(100ms);
      }
    }
    exec("DROP PUBLICATION IF EXISTS " + publication_);
  }

  pg::Result exec(const std::string& sql) { return pg::exec(conn_.get(), sql); }

  void publish(const std::string& tables) {
    exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + tables);
    exec("SELECT pg_create_logical_replication_slot('" + slot_ + "', 'pgoutput')");
  }

  std::vector<Change> peek(bool binary = false) {
    exec("SET TimeZone = 'UTC'");  // timestamptz columns are sent as the decoding session prints
                                   // them
    const pg::Result rows = pg::exec(
        conn_.get(),
        "SELECT lsn::text, xid::text, encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes("
        "$1, NULL, NULL, 'proto_version', '1', 'publication_names', $2, 'messages', 'true', "
        "'binary', $3)",
        {slot_.c_str(), publication_.c_str(), binary ? "true" : "false"});
    std::vector<Change> changes;
    for (int row = 0; row < rows.rows(); ++row) {
      changes.push_back({parse_lsn(std::string(rows.text(row, 0))),
                         static_cast<std::uint32_t>(std::stoul(std::string(rows.text(row, 1)))),
                         from_hex(rows.text(row, 2))});
    }
    return changes;
  }

  // Decodes every change; each must decode.
  static std::vector<PgOutputMessage> decode_all(const std::vector<Change>& changes) {
    std::vector<PgOutputMessage> messages;
    for (const Change& change : changes) {
      messages.push_back(cdc::decode_pgoutput(change.data));
      dump(std::string(1, kind_of(messages.back())), change.data);
      if (const auto* error = std::get_if<cdc::DecodeError>(&messages.back())) {
        ADD_FAILURE() << error->message << " in " << to_hex(change.data);
      }
    }
    return messages;
  }

  // Until the WAL written so far is flushed.
  void wait_for_flush() {
    const std::string written(exec("SELECT pg_current_wal_insert_lsn()::text").text(0, 0));
    for (int attempt = 0; attempt < 100; ++attempt) {
      const pg::Result flushed = pg::exec(
          conn_.get(), "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn", {written.c_str()});
      if (flushed.text(0, 0) == "t") return;
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "WAL up to " << written << " not flushed after 10 s";
  }

  std::uint32_t oid_of(const std::string& table) {
    return static_cast<std::uint32_t>(
        exec("SELECT '" + table + "'::regclass::oid::bigint").int64(0, 0));
  }

  SchemaName schema_ = fresh_schema();
  pg::Connection conn_ = connect();
  std::string slot_ = schema_.name() + "_slot";
  std::string publication_ = schema_.name() + "_pub";
};

TEST_F(PgoutputTest, DecodesAnInsertAsPostgres15SendsIt) {
  const std::string table = schema_.table("cdc_events");
  exec("CREATE TABLE " + table +
       " (id bigint PRIMARY KEY, name text, payload jsonb, note text, created_at timestamptz)");
  publish(table);
  exec("INSERT INTO " + table +
       " VALUES (1, 'héllo, wörld', '{\"a\": [1, 2]}', NULL, '2024-01-02 03:04:05.678901+00')");
  const std::vector<Change> changes = peek();
  const std::vector<PgOutputMessage> messages = decode_all(changes);
  ASSERT_EQ(kinds_of(messages), "BRIC");

  const auto& begin = std::get<cdc::Begin>(messages[0]);
  const auto& commit = std::get<cdc::Commit>(messages[3]);
  EXPECT_EQ(begin.xid, changes[0].xid);
  EXPECT_EQ(begin.final_lsn, commit.commit_lsn);
  EXPECT_EQ(begin.commit_time, commit.commit_time);
  EXPECT_EQ(commit.end_lsn, changes[3].lsn);
  EXPECT_GT(commit.end_lsn, commit.commit_lsn);
  const cdc::PgTimestamp now = cdc::to_pg_timestamp(std::chrono::system_clock::now());
  EXPECT_LT(std::abs(now - commit.commit_time), 3'600'000'000) << "within an hour of now";

  const auto& relation = std::get<cdc::Relation>(messages[1]);
  EXPECT_EQ(relation.relation_id, oid_of(table));
  EXPECT_EQ(relation.namespace_name, schema_.name());
  EXPECT_EQ(relation.name, "cdc_events");
  EXPECT_EQ(relation.replica_identity, 'd');
  ASSERT_EQ(relation.columns.size(), 5U);
  const std::vector<std::string> names{"id", "name", "payload", "note", "created_at"};
  // int8, text, jsonb, text, timestamptz
  const std::vector<std::uint32_t> types{20, 25, 3802, 25, 1184};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(relation.columns[i].name, names[i]);
    EXPECT_EQ(relation.columns[i].type_oid, types[i]);
    EXPECT_EQ(relation.columns[i].type_modifier, -1);
    EXPECT_EQ(relation.columns[i].is_key(), i == 0);
  }
  const auto positions = cdc::find_columns(relation, {"payload", "id"});
  ASSERT_TRUE(std::holds_alternative<std::vector<std::size_t>>(positions));
  EXPECT_EQ(std::get<std::vector<std::size_t>>(positions), (std::vector<std::size_t>{2, 0}));

  const auto& insert = std::get<cdc::Insert>(messages[2]);
  EXPECT_EQ(insert.relation_id, relation.relation_id);
  ASSERT_EQ(insert.columns.size(), 5U);
  const std::vector<std::string> values{"1", "héllo, wörld", R"({"a": [1, 2]})", "",
                                        "2024-01-02 03:04:05.678901+00"};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(insert.columns[i].kind, i == 3 ? cdc::ColumnKind::null : cdc::ColumnKind::text) << i;
    EXPECT_EQ(insert.columns[i].value, values[i]) << i;
  }
}

TEST_F(PgoutputTest, DecodesMessagesAsPostgres15SendsThem) {
  const std::string table = schema_.table("cdc_quiet");
  exec("CREATE TABLE " + table + " (id bigint PRIMARY KEY)");
  publish(table);
  const std::string emitted_at(
      exec("SELECT pg_logical_emit_message(true, 'outbox', 'event ''one''')::text").text(0, 0));
  exec("SELECT pg_logical_emit_message(true, 'outbox', '\\x00ff61'::bytea)");
  exec("SELECT pg_logical_emit_message(false, 'outbox-now', 'not transactional')");
  // PostgreSQL 15 does not flush WAL for a non-transactional message (version 17 added a `flush`
  // argument for that), and logical decoding reads only flushed WAL: the message reaches a slot
  // once something else flushes, here the WAL writer within wal_writer_delay (200 ms).
  wait_for_flush();

  const std::vector<Change> changes = peek();
  const std::vector<PgOutputMessage> messages = decode_all(changes);
  // Every transactional message has a transaction of its own; the last one has none.
  ASSERT_EQ(kinds_of(messages), "BMCBMCM");

  const auto& first = std::get<cdc::LogicalMessage>(messages[1]);
  EXPECT_TRUE(first.transactional());
  EXPECT_EQ(first.prefix, "outbox");
  EXPECT_EQ(first.content, "event 'one'");
  EXPECT_EQ(first.lsn, changes[1].lsn);
  // What pg_logical_emit_message returned: not where the message's WAL record starts but where it
  // ends, here where the commit record that follows it at once starts.
  EXPECT_EQ(first.lsn, parse_lsn(emitted_at));
  EXPECT_EQ(first.lsn, std::get<cdc::Commit>(messages[2]).commit_lsn);
  EXPECT_EQ(std::get<cdc::LogicalMessage>(messages[4]).content, std::string("\0\xff\x61", 3));
  const auto& immediate = std::get<cdc::LogicalMessage>(messages[6]);
  EXPECT_FALSE(immediate.transactional());
  EXPECT_EQ(immediate.flags, 0);
  EXPECT_EQ(immediate.prefix, "outbox-now");
  EXPECT_EQ(immediate.content, "not transactional");
  EXPECT_EQ(immediate.lsn, changes[6].lsn);
}

// Updates (new row only; old key and new; old row and new, with an unchanged TOASTed value),
// deletes (by key, by full row), a truncate, a type of the user's and a replication origin: each
// decodes as its kind (updates as Update, the rest as Ignored), and the stream around them as
// usual.
TEST_F(PgoutputTest, ChecksAndSkipsEveryOtherKindPostgres15Sends) {
  const std::string table = schema_.table("cdc_moods");
  exec("CREATE TYPE " + schema_.quoted() + ".mood AS ENUM ('calm', 'tense')");
  exec("CREATE TABLE " + table + " (id bigint PRIMARY KEY, mood " + schema_.quoted() +
       ".mood, big text, small int)");
  // Stored out of line uncompressed: an update that leaves it alone sends it as 'u'.
  exec("ALTER TABLE " + table + " ALTER COLUMN big SET STORAGE EXTERNAL");
  publish(table);
  exec("INSERT INTO " + table + " VALUES (1, 'calm', repeat('x', 10000), 1)");
  exec("UPDATE " + table + " SET small = 2 WHERE id = 1");
  exec("UPDATE " + table + " SET id = 2 WHERE id = 1");
  exec("DELETE FROM " + table + " WHERE id = 2");
  exec("INSERT INTO " + table + " VALUES (3, 'tense', 'y', 3)");
  exec("ALTER TABLE " + table + " REPLICA IDENTITY FULL");
  exec("UPDATE " + table + " SET small = 4 WHERE id = 3");
  exec("DELETE FROM " + table + " WHERE id = 3");
  exec("TRUNCATE " + table);
  const std::string origin = schema_.name() + "_origin";
  {
    pg::Connection other = connect();
    pg::exec(other.get(), "SELECT pg_replication_origin_create('" + origin + "')");
    pg::exec(other.get(), "SELECT pg_replication_origin_session_setup('" + origin + "')");
    pg::exec(other.get(), "INSERT INTO " + table + " VALUES (5, 'calm', 'z', 5)");
    pg::exec(other.get(), "SELECT pg_replication_origin_session_reset()");
  }
  exec("SELECT pg_replication_origin_drop('" + origin + "')");

  const std::vector<Change> changes = peek();
  const std::vector<PgOutputMessage> messages = decode_all(changes);
  const std::string kinds = kinds_of(messages);
  EXPECT_EQ(kinds.find('!'), std::string::npos) << kinds;
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 'U'), 3) << kinds;
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 'D'), 2) << kinds;
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 'T'), 1) << kinds;
  EXPECT_GE(std::count(kinds.begin(), kinds.end(), 'Y'), 1) << kinds;
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 'O'), 1) << kinds;
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 'I'), 3) << kinds;
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 'B'),
            std::count(kinds.begin(), kinds.end(), 'C'));
  // The origin comes right after the Begin of the transaction that carries it.
  EXPECT_NE(kinds.find("BO"), std::string::npos) << kinds;
}

// With the slot's 'binary' option, columns come as their type's send function writes them.
TEST_F(PgoutputTest, DecodesBinaryColumns) {
  const std::string table = schema_.table("cdc_binary");
  exec("CREATE TABLE " + table + " (id bigint PRIMARY KEY, flag boolean, name text, gone int)");
  publish(table);
  exec("INSERT INTO " + table + " VALUES (7, true, 'seven', NULL)");
  const std::vector<Change> changes = peek(/*binary=*/true);  // the values are views into it
  const std::vector<PgOutputMessage> messages = decode_all(changes);
  ASSERT_EQ(kinds_of(messages), "BRIC");
  const auto& insert = std::get<cdc::Insert>(messages[2]);
  ASSERT_EQ(insert.columns.size(), 4U);
  EXPECT_EQ(insert.columns[0].kind, cdc::ColumnKind::binary);
  EXPECT_EQ(insert.columns[0].value, std::string("\0\0\0\0\0\0\0\x07", 8));
  EXPECT_EQ(insert.columns[1].value, std::string("\x01", 1));
  EXPECT_EQ(insert.columns[2].value, "seven");
  EXPECT_EQ(insert.columns[3].kind, cdc::ColumnKind::null);
}

// The next CopyData message the walsender sends, or nullopt after `timeout`.
std::optional<std::string> next_frame(PGconn* conn, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    char* buffer = nullptr;
    const int length = PQgetCopyData(conn, &buffer, /*async=*/1);
    if (length > 0) {
      std::string frame(buffer, static_cast<std::size_t>(length));
      PQfreemem(buffer);
      return frame;
    }
    if (length < 0) {
      ADD_FAILURE() << "the copy ended: " << PQerrorMessage(conn);
      return std::nullopt;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) return std::nullopt;
    pollfd fd{PQsocket(conn), POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(left.count()));
    if (PQconsumeInput(conn) == 0) {
      ADD_FAILURE() << PQerrorMessage(conn);
      return std::nullopt;
    }
  }
}

void send_frame(PGconn* conn, std::string_view bytes) {
  ASSERT_EQ(PQputCopyData(conn, bytes.data(), static_cast<int>(bytes.size())), 1);
  ASSERT_EQ(PQflush(conn), 0);
}

// Frames until a keepalive arrives after the last commit; returns the commit's end LSN.
Lsn read_until_keepalive(PGconn* conn, std::string& kinds) {
  Lsn end_lsn = 0;
  while (const std::optional<std::string> frame = next_frame(conn, 30s)) {
    const cdc::CopyDataMessage decoded = cdc::decode_copy_data(*frame);
    if (const auto* error = std::get_if<cdc::DecodeError>(&decoded)) {
      ADD_FAILURE() << error->message;
      break;
    }
    dump(frame->front() == 'w' ? "frame-w" : "frame-k", *frame);
    if (std::holds_alternative<cdc::PrimaryKeepalive>(decoded)) {
      if (end_lsn != 0) break;
      continue;
    }
    const auto& data = std::get<cdc::XLogData>(decoded);
    const PgOutputMessage message = cdc::decode_pgoutput(data.payload);
    kinds.push_back(kind_of(message));
    // Every frame carries a WAL position but the Relation's: PostgreSQL 15 sends it with 0/0.
    EXPECT_EQ(data.wal_start == 0, kind_of(message) == 'R') << kinds;
    if (const auto* commit = std::get_if<cdc::Commit>(&message)) end_lsn = commit->end_lsn;
  }
  return end_lsn;
}

TEST_F(PgoutputTest, StreamsFramesAndTakesStandbyStatusUpdates) {
  const std::string table = schema_.table("cdc_stream");
  exec("CREATE TABLE " + table + " (id bigint PRIMARY KEY, name text)");
  publish(table);
  exec("INSERT INTO " + table + " VALUES (1, 'one')");
  exec("SELECT pg_logical_emit_message(true, 'outbox', 'streamed')");

  pg::Connection replication = pg::Connection::open(database_url() + " replication=database");
  const pg::Result started(PQexec(replication.get(), ("START_REPLICATION SLOT " + slot_ +
                                                      " LOGICAL 0/0 (proto_version '1', "
                                                      "publication_names '" +
                                                      publication_ + "', messages 'true')")
                                                         .c_str()));
  ASSERT_EQ(PQresultStatus(started.get()), PGRES_COPY_BOTH) << PQerrorMessage(replication.get());

  std::string kinds;
  const Lsn end_lsn = read_until_keepalive(replication.get(), kinds);
  EXPECT_EQ(kinds, "BRICBMC");
  ASSERT_NE(end_lsn, 0U);

  // The status update moves the slot's confirmed_flush_lsn, and its reply-requested byte asks for
  // a keepalive at once.
  cdc::StandbyStatusUpdate update;
  update.written = update.flushed = update.applied = end_lsn;
  update.clock = cdc::to_pg_timestamp(std::chrono::system_clock::now());
  update.reply_requested = true;
  const auto bytes = cdc::encode_standby_status_update(update);
  send_frame(replication.get(), std::string_view(bytes.data(), bytes.size()));
  const std::optional<std::string> answer = next_frame(replication.get(), 10s);
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(std::holds_alternative<cdc::PrimaryKeepalive>(cdc::decode_copy_data(*answer)));

  Lsn confirmed = 0;
  for (int attempt = 0; attempt < 100 && confirmed < end_lsn; ++attempt) {
    const pg::Result row = exec(
        "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM "
        "pg_replication_slots WHERE slot_name = '" +
        slot_ + "'");
    confirmed = parse_lsn(std::string(row.text(0, 0)));
    if (confirmed < end_lsn) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(cdc::format_lsn(confirmed), cdc::format_lsn(end_lsn));
}

}  // namespace
}  // namespace outbox::testing
