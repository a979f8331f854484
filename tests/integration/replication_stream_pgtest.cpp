// The replication stream (src/cdc/replication_stream.hpp) against the embedded PostgreSQL 15
// (wal_level=logical): connecting (URIs too, and the refusals no retry fixes), slots, streaming
// two transactions, confirming progress and restarting after it, and every error the relay must
// tell apart, each as the server sends it: a slot in use, missing or invalidated, a missing
// publication, a terminated walsender, a client that does not answer keepalives. Each test prints
// what PostgreSQL sent ("measured: ...").

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cdc/replication_stream.hpp"
#include "support/pgoutput_writer.hpp"
#include "support/test_env.hpp"
#include "unit/contains.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;
using cdc::Lsn;
using cdc::ReplicationError;
using cdc::ReplicationFailure;
using cdc::ReplicationStream;
using Clock = std::chrono::steady_clock;

using cdc::wire::kind_of;

struct Transaction {
  cdc::Begin begin;
  std::vector<std::vector<std::string>> rows;  // each Insert's column values
  cdc::Commit commit;
};

struct Received {
  std::string kinds;  // one letter per pgoutput message
  std::vector<cdc::Relation> relations;
  std::vector<Transaction> transactions;  // complete ones
  int replies_requested = 0;
};

void add(Received& received, const cdc::PgOutputMessage& message) {
  received.kinds.push_back(kind_of(message));
  if (const auto* begin = std::get_if<cdc::Begin>(&message)) {
    received.transactions.push_back({*begin, {}, {}});
  } else if (const auto* relation = std::get_if<cdc::Relation>(&message)) {
    received.relations.push_back(*relation);
  } else if (const auto* insert = std::get_if<cdc::Insert>(&message)) {
    std::vector<std::string> row;
    for (const cdc::TupleColumn& column : insert->columns) row.emplace_back(column.value);
    if (!received.transactions.empty()) received.transactions.back().rows.push_back(row);
  } else if (const auto* commit = std::get_if<cdc::Commit>(&message)) {
    if (!received.transactions.empty()) received.transactions.back().commit = *commit;
  } else if (const auto* error = std::get_if<cdc::DecodeError>(&message)) {
    ADD_FAILURE() << error->message;
  }
}

std::size_t commits(const Received& received) {
  return static_cast<std::size_t>(std::count(received.kinds.begin(), received.kinds.end(), 'C'));
}

// Reads until `count` Commits arrived (a failure after `timeout`), answering the status updates
// that are due with what was received (nothing confirmed).
Received receive(ReplicationStream& stream, std::size_t count, std::chrono::milliseconds timeout) {
  Received received;
  const auto deadline = Clock::now() + timeout;
  while (commits(received) < count) {
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "only " << received.kinds << " after " << timeout.count() << " ms";
      break;
    }
    std::optional<cdc::StreamMessage> message = stream.read(100ms);
    if (stream.status_due()) stream.send_status(stream.received_lsn(), 0, 0);
    if (!message) continue;
    if (const auto* keepalive = message->keepalive()) {
      received.replies_requested += keepalive->reply_requested ? 1 : 0;
      continue;
    }
    EXPECT_EQ(message->bytes().front(), 'w');
    add(received, cdc::decode_pgoutput(message->xlog_data()->payload));
  }
  return received;
}

// Calls `call` until it throws a ReplicationError (a failure if it has not after `timeout`).
std::optional<ReplicationError> error_of(const std::function<void()>& call,
                                         std::chrono::milliseconds timeout = 0ms) {
  const auto deadline = Clock::now() + timeout;
  do {
    try {
      call();
    } catch (const ReplicationError& error) {
      std::printf("measured: %s, SQLSTATE %s, retryable %d: %s\n",
                  std::string(cdc::to_string(error.failure())).c_str(), error.sqlstate().c_str(),
                  static_cast<int>(error.retryable()), error.what());
      return error;
    }
  } while (Clock::now() < deadline);
  ADD_FAILURE() << "no ReplicationError";
  return std::nullopt;
}

// ALTER SYSTEM SET name = value and a reload, undone (RESET, reload) on destruction; waits until
// new sessions see each.
class ServerSetting {
 public:
  ServerSetting(std::string name, const std::string& value, const std::string& shown)
      : name_(std::move(name)), original_(show()) {
    pg::Connection conn = connect();
    pg::exec(conn.get(), "ALTER SYSTEM SET " + name_ + " = '" + value + "'");
    pg::exec(conn.get(), "SELECT pg_reload_conf()");
    wait_for(shown);
  }
  ~ServerSetting() {
    try {
      pg::Connection conn = connect();
      pg::exec(conn.get(), "ALTER SYSTEM RESET " + name_);
      pg::exec(conn.get(), "SELECT pg_reload_conf()");
      wait_for(original_);
    } catch (const std::exception& error) {
      ADD_FAILURE() << "restoring " << name_ << ": " << error.what();
    }
  }
  ServerSetting(const ServerSetting&) = delete;
  ServerSetting& operator=(const ServerSetting&) = delete;

 private:
  [[nodiscard]] std::string show() const {
    pg::Connection conn = connect();  // a new session: it reads what the postmaster has now
    return std::string(pg::exec(conn.get(), "SHOW " + name_).text(0, 0));
  }
  void wait_for(const std::string& shown) const {
    for (int attempt = 0; attempt < 100; ++attempt) {
      if (show() == shown) return;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << name_ << " never showed " << shown;
  }

  std::string name_;
  std::string original_;
};

// The test environment's connection string as a URI (postgresql://user@/db?host=...), with
// `extra` query parameters.
std::string as_uri(const std::string& conninfo, const std::string& extra) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(conninfo.c_str(), &error), &PQconninfoFree);
  if (error != nullptr) PQfreemem(error);
  auto encode = [](std::string_view text) {
    std::string out;
    for (const char c : text) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
        out += c;
      } else {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
        out += hex;
      }
    }
    return out;
  };
  std::string user;
  std::string dbname;
  std::string query;
  for (const PQconninfoOption* option = options.get(); option && option->keyword; ++option) {
    if (option->val == nullptr) continue;
    const std::string keyword = option->keyword;
    if (keyword == "user") {
      user = encode(option->val);
    } else if (keyword == "dbname") {
      dbname = encode(option->val);
    } else if (keyword == "host" || keyword == "port" || keyword == "passfile") {
      query += (query.empty() ? "?" : "&") + keyword + "=" + encode(option->val);
    }
  }
  return "postgresql://" + user + "@/" + dbname + query + "&" + extra;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

// A fresh schema with a table and a publication of its inserts; slots named after the schema are
// dropped at the end.
class ReplicationStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exec("CREATE TABLE " + table_ + " (id bigint PRIMARY KEY, name text)");
    exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + table_ +
         " WITH (publish = 'insert')");
  }

  void TearDown() override {
    // A walsender that just lost its client may hold a slot a moment longer.
    for (int attempt = 0; attempt < 100; ++attempt) {
      try {
        exec(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE starts_with(slot_name::text, '" +
            schema_.name() + "')");
        break;
      } catch (const DatabaseError&) {
        std::this_thread::sleep_for(100ms);
      }
    }
    exec("DROP PUBLICATION IF EXISTS " + publication_);
  }

  pg::Result exec(const std::string& sql) { return pg::exec(conn_.get(), sql); }
  std::string text(const std::string& sql) { return std::string(exec(sql).text(0, 0)); }

  void insert(const std::string& values) { exec("INSERT INTO " + table_ + " VALUES " + values); }

  [[nodiscard]] std::unique_ptr<ReplicationStream> open_stream() const {
    cdc::ReplicationStreamOptions options;
    options.application_name = "outbox-cdc-test";
    return std::make_unique<ReplicationStream>(database_url(), options);
  }

  // pg_replication_slots' confirmed_flush_lsn, read over a normal connection.
  Lsn confirmed_flush() {
    const pg::Result row = exec(
        "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE "
        "slot_name = '" +
        slot_ + "'");
    return row.rows() == 1 ? cdc::parse_lsn(row.text(0, 0)).value_or(0) : 0;
  }

  SchemaName schema_ = fresh_schema();
  pg::Connection conn_ = connect();
  std::string table_ = schema_.table("cdc_rows");
  std::string slot_ = schema_.name() + "_slot";
  std::string publication_ = schema_.name() + "_pub";
};

TEST_F(ReplicationStreamTest, ConnectsAndIdentifiesTheSystem) {
  const auto stream = open_stream();
  const cdc::SystemIdentity& identity = stream->identity();
  EXPECT_EQ(identity.dbname, "outbox");
  EXPECT_EQ(identity.timeline, 1U);
  EXPECT_EQ(identity.system_id, text("SELECT system_identifier::text FROM pg_control_system()"));
  EXPECT_GT(identity.xlog_pos, 0U);
  EXPECT_LE(identity.xlog_pos,
            cdc::parse_lsn(text("SELECT pg_current_wal_flush_lsn()::text")).value_or(0));
  EXPECT_EQ(text("SELECT backend_type || ' ' || application_name FROM pg_stat_activity "
                 "WHERE pid = " +
                 std::to_string(stream->backend_pid())),
            "walsender outbox-cdc-test");
  EXPECT_FALSE(stream->streaming());

  // A URI that says replication=0 still gets a replication connection to its database.
  ReplicationStream from_uri(as_uri(database_url(), "replication=0"));
  EXPECT_EQ(from_uri.identity().dbname, "outbox");
  EXPECT_EQ(from_uri.identity().system_id, identity.system_id);
}

TEST_F(ReplicationStreamTest, RefusalsNoRetryFixesAreToldFromAnOutage) {
  const std::string role = schema_.name() + "_norepl";
  const std::string password = "Secret-Pw-" + schema_.name();
  exec("CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'");
  const auto no_replication = error_of(
      [&] { ReplicationStream(database_url() + " user=" + role + " password=" + password); });
  exec("DROP ROLE " + role);
  ASSERT_TRUE(no_replication);
  EXPECT_EQ(no_replication->failure(), ReplicationFailure::not_permitted);
  EXPECT_EQ(no_replication->sqlstate(), "42501");
  EXPECT_FALSE(no_replication->retryable());
  EXPECT_TRUE(contains(no_replication->what(), "REPLICATION attribute"));
  EXPECT_TRUE(contains(no_replication->what(), "must be superuser or replication role"));
  EXPECT_FALSE(contains(no_replication->what(), password)) << "the password is never printed";

  const auto no_database = error_of([] { ReplicationStream(database_url() + " dbname=nosuchdb"); });
  ASSERT_TRUE(no_database);
  EXPECT_EQ(no_database->failure(), ReplicationFailure::other);
  EXPECT_EQ(no_database->sqlstate(), "3D000");
  EXPECT_FALSE(no_database->retryable());

  const auto down = error_of([] {
    ReplicationStream("host=127.0.0.1 port=" + std::to_string(free_port()) +
                      " dbname=outbox user=nobody connect_timeout=2");
  });
  ASSERT_TRUE(down);
  EXPECT_EQ(down->failure(), ReplicationFailure::unavailable);
  EXPECT_TRUE(down->retryable());
}

// 1. Begin, Relation, Insert and Commit of two transactions, with their values.
TEST_F(ReplicationStreamTest, StreamsTwoTransactionsFromTheConsistentPoint) {
  const auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, /*export_snapshot=*/false);
  EXPECT_EQ(created.name, slot_);
  EXPECT_TRUE(created.snapshot_name.empty());
  EXPECT_GT(created.consistent_point, 0U);
  const std::optional<cdc::SlotInfo> slot = stream->find_slot(slot_);
  ASSERT_TRUE(slot);
  EXPECT_EQ(slot->slot_type, "logical");
  EXPECT_EQ(slot->plugin, "pgoutput");
  EXPECT_EQ(slot->database, "outbox");
  EXPECT_FALSE(slot->active);
  EXPECT_FALSE(slot->active_pid);
  EXPECT_EQ(slot->confirmed_flush_lsn, created.consistent_point);
  EXPECT_TRUE(slot->restart_lsn);
  EXPECT_EQ(slot->wal_status, cdc::WalStatus::reserved);
  EXPECT_FALSE(slot->safe_wal_size) << "max_slot_wal_keep_size is -1 (unlimited)";

  stream->start(slot_, publication_, created.consistent_point);
  EXPECT_TRUE(stream->streaming());
  exec("BEGIN");
  insert("(1, 'one'), (2, 'twö')");
  exec("COMMIT");
  insert("(3, NULL)");
  const Received received = receive(*stream, 2, 30s);
  EXPECT_EQ(received.kinds, "BRIICBIC");
  ASSERT_EQ(received.transactions.size(), 2U);
  ASSERT_EQ(received.relations.size(), 1U);
  EXPECT_EQ(received.relations[0].namespace_name, schema_.name());
  EXPECT_EQ(received.relations[0].name, "cdc_rows");
  const Transaction& first = received.transactions[0];
  const Transaction& second = received.transactions[1];
  EXPECT_EQ(first.rows, (std::vector<std::vector<std::string>>{{"1", "one"}, {"2", "twö"}}));
  EXPECT_EQ(second.rows, (std::vector<std::vector<std::string>>{{"3", ""}}));
  EXPECT_EQ(first.begin.final_lsn, first.commit.commit_lsn);
  EXPECT_EQ(second.begin.final_lsn, second.commit.commit_lsn);
  EXPECT_NE(first.begin.xid, second.begin.xid);
  EXPECT_GT(first.commit.end_lsn, created.consistent_point);
  EXPECT_LT(first.commit.end_lsn, second.commit.commit_lsn);
  EXPECT_GE(stream->received_lsn(), second.commit.end_lsn);
}

// The publication_names option is a list of identifiers inside a string literal: a name with
// capitals, quotes and a comma reaches pgoutput whole.
TEST_F(ReplicationStreamTest, QuotesAPublicationNameAsPgoutputReadsIt) {
  const std::string odd = schema_.name() + R"( Odd "Pub", 'x')";
  const std::string quoted = "\"" + schema_.name() + R"( Odd ""Pub"", 'x'")";
  exec("CREATE PUBLICATION " + quoted + " FOR TABLE " + table_ + " WITH (publish = 'insert')");
  const auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, false);
  stream->start(slot_, odd, created.consistent_point);
  insert("(1, 'odd')");
  const Received received = receive(*stream, 1, 30s);
  exec("DROP PUBLICATION " + quoted);
  EXPECT_EQ(received.kinds, "BRIC");
  ASSERT_EQ(received.transactions.size(), 1U);
  EXPECT_EQ(received.transactions[0].rows, (std::vector<std::vector<std::string>>{{"1", "odd"}}));
}

// A message owns libpq's buffer: its payload stays valid when messages move (a vector growing).
TEST_F(ReplicationStreamTest, MessagesOwnTheirBytesAcrossMoves) {
  const auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, false);
  stream->start(slot_, publication_, created.consistent_point);
  insert("(1, '" + std::string(200, 'x') + "')");
  std::vector<cdc::StreamMessage> kept;
  const auto deadline = Clock::now() + 30s;
  // Until the Commit ('C'). (It waited for a message under 40 bytes, which never came: every
  // run took the whole 30 s.)
  const auto committed = [&] {
    return !kept.empty() && kept.back().xlog_data()->payload.substr(0, 1) == "C";
  };
  while (Clock::now() < deadline && !committed()) {
    if (auto message = stream->read(100ms); message && message->xlog_data()) {
      kept.push_back(std::move(*message));  // moved twice: out of the optional, by reallocation
    }
  }
  Received received;
  for (const cdc::StreamMessage& message : kept) {
    add(received, cdc::decode_pgoutput(message.xlog_data()->payload));
  }
  EXPECT_EQ(received.kinds, "BRIC");
  ASSERT_EQ(received.transactions.size(), 1U);
  EXPECT_EQ(received.transactions[0].rows,
            (std::vector<std::vector<std::string>>{{"1", std::string(200, 'x')}}));
}

// 2. A confirmed position moves confirmed_flush_lsn; a stream started there gets only later
// transactions.
TEST_F(ReplicationStreamTest, ConfirmedFlushMovesAndARestartSkipsWhatWasConfirmed) {
  auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, false);
  stream->start(slot_, publication_, created.consistent_point);
  insert("(1, 'one')");
  insert("(2, 'two')");
  const Received before = receive(*stream, 2, 30s);
  ASSERT_EQ(before.transactions.size(), 2U);
  const Lsn first_end = before.transactions[0].commit.end_lsn;

  stream->send_status(stream->received_lsn(), first_end, first_end);
  EXPECT_FALSE(stream->status_due());
  Lsn confirmed = 0;
  for (int attempt = 0; attempt < 100 && confirmed != first_end; ++attempt) {
    confirmed = confirmed_flush();
    if (confirmed != first_end) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(cdc::format_lsn(confirmed), cdc::format_lsn(first_end));

  // stop() returns when the server has let go of the slot: the commands work again.
  stream->stop();
  EXPECT_FALSE(stream->streaming());
  const std::optional<cdc::SlotInfo> slot = stream->find_slot(slot_);
  ASSERT_TRUE(slot);
  EXPECT_FALSE(slot->active);
  EXPECT_EQ(slot->confirmed_flush_lsn, first_end);
  stream.reset();

  const auto restarted = open_stream();
  restarted->start(slot_, publication_, confirmed);
  const Received after = receive(*restarted, 1, 30s);
  EXPECT_EQ(after.kinds, "BRIC");
  ASSERT_EQ(after.transactions.size(), 1U);
  EXPECT_EQ(after.transactions[0].rows, (std::vector<std::vector<std::string>>{{"2", "two"}}));
  EXPECT_EQ(after.transactions[0].commit.end_lsn, before.transactions[1].commit.end_lsn);
  // And nothing more.
  const auto quiet_until = Clock::now() + 1s;
  while (Clock::now() < quiet_until) {
    const auto message = restarted->read(100ms);
    EXPECT_FALSE(message && message->xlog_data()) << "a change after the second transaction";
  }
}

// 3. One slot, one consumer.
TEST_F(ReplicationStreamTest, ASecondStreamOnAnActiveSlotIsRefused) {
  const auto first = open_stream();
  const cdc::CreatedSlot created = first->create_slot(slot_, false);
  first->start(slot_, publication_, created.consistent_point);
  const auto second = open_stream();
  const auto in_use = error_of([&] { second->start(slot_, publication_, 0); });
  ASSERT_TRUE(in_use);
  EXPECT_EQ(in_use->failure(), ReplicationFailure::slot_in_use);
  EXPECT_EQ(in_use->sqlstate(), "55006");
  EXPECT_TRUE(in_use->retryable());
  EXPECT_TRUE(contains(in_use->what(), "replication slot \"" + slot_ + "\" is active for PID " +
                                           std::to_string(first->backend_pid())));
  EXPECT_FALSE(second->streaming());
  const auto drop_in_use = error_of([&] { second->drop_slot(slot_); });
  ASSERT_TRUE(drop_in_use);
  EXPECT_EQ(drop_in_use->failure(), ReplicationFailure::slot_in_use);

  first->stop();
  second->start(slot_, publication_, 0);  // released: the second may take it now
  EXPECT_TRUE(second->streaming());
}

// 4a. No slot of that name.
TEST_F(ReplicationStreamTest, AMissingSlotIsToldApart) {
  const auto stream = open_stream();
  const auto never_created = error_of([&] { stream->start(slot_, publication_, 0); });
  ASSERT_TRUE(never_created);
  EXPECT_EQ(never_created->failure(), ReplicationFailure::slot_missing);
  EXPECT_EQ(never_created->sqlstate(), "42704");
  EXPECT_FALSE(never_created->retryable());
  EXPECT_TRUE(contains(never_created->what(), "replication slot \"" + slot_ + "\" does not exist"));
  EXPECT_FALSE(stream->streaming());

  stream->create_slot(slot_, false);
  const auto twice = error_of([&] { stream->create_slot(slot_, false); });
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->failure(), ReplicationFailure::slot_exists);
  EXPECT_EQ(twice->sqlstate(), "42710");

  stream->drop_slot(slot_);
  EXPECT_FALSE(stream->find_slot(slot_));
  const auto dropped = error_of([&] { stream->start(slot_, publication_, 0); });
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped->failure(), ReplicationFailure::slot_missing);
  const auto drop_again = error_of([&] { stream->drop_slot(slot_); });
  ASSERT_TRUE(drop_again);
  EXPECT_EQ(drop_again->failure(), ReplicationFailure::slot_missing);
  EXPECT_EQ(drop_again->sqlstate(), "42704");

  EXPECT_THROW(stream->start("Bad-Name", publication_, 0), InvalidArgument);
  EXPECT_THROW(stream->start(slot_, "bad\npub", 0), InvalidArgument);
}

// 4b. PostgreSQL 15 looks the publication up when it decodes the first change.
TEST_F(ReplicationStreamTest, AMissingPublicationIsToldApartFromAMissingSlot) {
  const auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, false);
  const std::string missing = schema_.name() + "_nopub";
  stream->start(slot_, missing, created.consistent_point);
  insert("(1, 'one')");
  const auto error = error_of(
      [&] {
        while (stream->read(1s)) {
        }
      },
      10s);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->failure(), ReplicationFailure::publication_missing);
  EXPECT_EQ(error->sqlstate(), "42704");
  EXPECT_FALSE(error->retryable());
  EXPECT_TRUE(contains(error->what(), "publication \"" + missing + "\" does not exist"));
  // An ERROR (not FATAL) ends the stream, not the connection.
  EXPECT_FALSE(stream->streaming());
  const std::optional<cdc::SlotInfo> slot = stream->find_slot(slot_);
  ASSERT_TRUE(slot);
  EXPECT_FALSE(slot->active);
  EXPECT_EQ(slot->confirmed_flush_lsn, created.consistent_point) << "nothing was confirmed";
}

// 5. A terminated walsender: read() throws a retryable error at once.
TEST_F(ReplicationStreamTest, ATerminatedWalsenderIsARetryableLostConnection) {
  const auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, false);
  stream->start(slot_, publication_, created.consistent_point);
  EXPECT_EQ(
      text("SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = '" + slot_ + "'"),
      std::to_string(stream->backend_pid()));
  const auto terminated_at = Clock::now();
  EXPECT_EQ(text("SELECT pg_terminate_backend(" + std::to_string(stream->backend_pid()) + ")"),
            "t");
  const auto error = error_of(
      [&] {
        while (true) stream->read(100ms);
      },
      5s);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - terminated_at);
  std::printf("measured: read() threw %lld ms after pg_terminate_backend\n",
              static_cast<long long>(took.count()));
  ASSERT_TRUE(error);
  EXPECT_EQ(error->failure(), ReplicationFailure::unavailable);
  EXPECT_TRUE(error->retryable());
  EXPECT_LT(took, 2s);
  EXPECT_FALSE(stream->streaming());
  EXPECT_THROW(stream->read(0ms), ReplicationError) << "a broken stream stays broken";
}

// 6. wal_sender_timeout: a stream that answers keepalives stays; one that does not is dropped.
TEST_F(ReplicationStreamTest, KeepalivesAskingForAReplyMustBeAnswered) {
  const ServerSetting timeout("wal_sender_timeout", "2s", "2s");
  auto answering = open_stream();
  const cdc::CreatedSlot created = answering->create_slot(slot_, false);
  answering->start(slot_, publication_, created.consistent_point);
  int replies = 0;
  const auto idle_until = Clock::now() + 6s;
  while (Clock::now() < idle_until) {
    const auto message =
        answering->read(std::min<std::chrono::milliseconds>(answering->until_status_due(), 100ms));
    if (message && message->keepalive() && message->keepalive()->reply_requested) ++replies;
    if (answering->status_due()) answering->send_status(answering->received_lsn(), 0, 0);
  }
  std::printf("measured: %d keepalives asked for a reply in 6 s of idleness\n", replies);
  EXPECT_GE(replies, 3) << "about one per wal_sender_timeout / 2";
  insert("(1, 'still there')");
  const Received received = receive(*answering, 1, 10s);
  EXPECT_EQ(received.kinds, "BRIC");
  answering->stop();
  answering.reset();

  const auto silent = open_stream();
  silent->start(slot_, publication_, 0);
  int ignored = 0;
  const auto started = Clock::now();
  const auto error = error_of(
      [&] {
        while (true) {
          const auto message = silent->read(100ms);
          if (message && message->keepalive() && message->keepalive()->reply_requested) ++ignored;
        }
      },
      10s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  std::printf("measured: dropped after %lld ms, %d keepalives ignored\n",
              static_cast<long long>(took.count()), ignored);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->failure(), ReplicationFailure::unavailable);
  EXPECT_TRUE(error->retryable());
  EXPECT_GE(ignored, 1);
  EXPECT_GE(took, 1500ms);
  EXPECT_LT(took, 6s);
}

// 7. A slot that fell further behind than max_slot_wal_keep_size is invalidated at a checkpoint.
TEST_F(ReplicationStreamTest, AnInvalidatedSlotIsToldApart) {
  const auto began = Clock::now();
  const ServerSetting keep("max_slot_wal_keep_size", "1MB", "1MB");
  const auto stream = open_stream();
  stream->create_slot(slot_, false);
  const std::optional<cdc::SlotInfo> fresh = stream->find_slot(slot_);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->wal_status, cdc::WalStatus::reserved);
  ASSERT_TRUE(fresh->safe_wal_size) << "limited now";
  // What can still be written before the slot's segment falls out of the 1 MB kept: up to the
  // end of the next segment at most.
  EXPECT_GT(*fresh->safe_wal_size, 0);
  EXPECT_LE(*fresh->safe_wal_size, 2 * 16 * 1024 * 1024);

  int segments = 0;
  std::string status;
  for (; segments < 20 && status != "lost"; ++segments) {
    insert("(" + std::to_string(segments + 1) + ", 'filler')");
    exec("SELECT pg_switch_wal()");
    exec("CHECKPOINT");
    status = text("SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = '" +
                  slot_ + "'");
  }
  std::printf("measured: wal_segment_size %s, wal_status %s after %d segment switches\n",
              text("SHOW wal_segment_size").c_str(), status.c_str(), segments);
  ASSERT_EQ(status, "lost");
  const std::optional<cdc::SlotInfo> lost = stream->find_slot(slot_);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->wal_status, cdc::WalStatus::lost);
  EXPECT_FALSE(lost->restart_lsn);
  EXPECT_FALSE(lost->safe_wal_size);

  const auto invalidated = error_of([&] { stream->start(slot_, publication_, 0); });
  ASSERT_TRUE(invalidated);
  EXPECT_EQ(invalidated->failure(), ReplicationFailure::slot_invalidated);
  EXPECT_EQ(invalidated->sqlstate(), "55000");
  EXPECT_FALSE(invalidated->retryable());
  EXPECT_TRUE(contains(invalidated->what(), "invalidated"));
  std::printf(
      "measured: the invalidation test took %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count()));
}

// 8. The exported snapshot shows what the slot's stream will not send, and the stream sends what
// the snapshot does not show.
TEST_F(ReplicationStreamTest, TheExportedSnapshotAndTheStreamMeetAtTheConsistentPoint) {
  insert("(1, 'before'), (2, 'before')");
  const auto stream = open_stream();
  const cdc::CreatedSlot created = stream->create_slot(slot_, /*export_snapshot=*/true);
  ASSERT_FALSE(created.snapshot_name.empty());
  insert("(3, 'after')");

  pg::Connection reader = connect();
  pg::exec(reader.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ");
  pg::exec(reader.get(), "SET TRANSACTION SNAPSHOT '" + created.snapshot_name + "'");
  EXPECT_EQ(
      pg::exec(reader.get(), "SELECT array_agg(id ORDER BY id)::text FROM " + table_).text(0, 0),
      "{1,2}");
  pg::exec(reader.get(), "COMMIT");

  stream->start(slot_, publication_, created.consistent_point);
  // The next command ended the export.
  pg::exec(reader.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ");
  EXPECT_THROW(pg::exec(reader.get(), "SET TRANSACTION SNAPSHOT '" + created.snapshot_name + "'"),
               DatabaseError);
  pg::rollback_quietly(reader.get());

  const Received received = receive(*stream, 1, 30s);
  EXPECT_EQ(received.kinds, "BRIC");
  ASSERT_EQ(received.transactions.size(), 1U);
  EXPECT_EQ(received.transactions[0].rows, (std::vector<std::vector<std::string>>{{"3", "after"}}));
}

}  // namespace
}  // namespace outbox::testing
