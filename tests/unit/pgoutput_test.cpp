// The pgoutput decoder and the streaming replication framing (src/cdc/pgoutput.hpp): every message
// kind, captured from PostgreSQL 15 and built by hand, and what malformed input gets: every proper
// prefix of every valid message is refused (each decoded from a heap block of exactly its size, so
// the ASan build catches a read past it), hostile counts fail before anything is reserved.

#include "cdc/pgoutput.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "contains.hpp"
#include "support/pgoutput_writer.hpp"

namespace outbox::cdc {
namespace {

std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return bytes;
}

// Captured from the embedded PostgreSQL 15.x (Debian's postgresql-15) by
// `OUTBOX_PGOUTPUT_DUMP=1 outbox_integration_tests --gtest_filter='PgoutputTest.*'`
// (tests/integration/pgoutput_pgtest.cpp): one row's `data` each of
// pg_logical_slot_peek_binary_changes(slot, NULL, NULL, 'proto_version', '1', 'publication_names',
// pub, 'messages', 'true'), and whole CopyData messages of a START_REPLICATION stream.
namespace captured {
// CREATE TABLE cdc_events (id bigint PRIMARY KEY, name text, payload jsonb, note text,
// created_at timestamptz); INSERT VALUES (1, 'héllo, wörld', '{"a": [1, 2]}', NULL,
// '2024-01-02 03:04:05.678901+00'): Begin, Relation, Insert, Commit.
constexpr std::string_view kBegin = "42000000000195b7080003048cf35ff37a000002d9";
constexpr std::string_view kRelation =
    "520000404f746465636f646573696e7365727473616e646d657373616765736173706f735f30006364635f657665"
    "6e7473006400050169640000000014ffffffff006e616d650000000019ffffffff007061796c6f61640000000eda"
    "ffffffff006e6f74650000000019ffffffff00637265617465645f617400000004a0ffffffff";
constexpr std::string_view kInsert =
    "490000404f4e0005740000000131740000000e68c3a96c6c6f2c2077c3b6726c64740000000d7b2261223a205b31"
    "2c20325d7d6e740000001d323032342d30312d30322030333a30343a30352e3637383930312b3030";
constexpr std::string_view kCommit = "4300000000000195b708000000000195b7380003048cf35ff37a";
// pg_logical_emit_message(true, 'outbox', 'event ''one'''), (true, 'outbox', '\x00ff61'::bytea),
// (false, 'outbox-now', 'not transactional').
constexpr std::string_view kMessage =
    "4d01000000000195b7806f7574626f78000000000b6576656e7420276f6e6527";
constexpr std::string_view kMessageWithNul = "4d01000000000195b7f06f7574626f78000000000300ff61";
constexpr std::string_view kMessageNotTransactional =
    "4d00000000000195b8706f7574626f782d6e6f7700000000116e6f74207472616e73616374696f6e616c";
// With 'binary' 'true': (id bigint, flag boolean, name text, gone int) = (7, true, 'seven', NULL).
constexpr std::string_view kBinaryInsert =
    "49000040a64e0004620000000800000000000000076200000001016200000005736576656e6e";
// A table (id bigint PRIMARY KEY, mood <enum>, big text STORAGE EXTERNAL, small int).
constexpr std::string_view kType =
    "59000040a774636865636b73616e64736b69707365766572796f746865726b696e64706f5f31006d6f6f6400";
constexpr std::string_view kRelationFullIdentity =
    "52000040ab74636865636b73616e64736b69707365766572796f746865726b696e64706f5f31006364635f6d6f6f"
    "6473006600040169640000000014ffffffff016d6f6f6400000040a7ffffffff016269670000000019ffffffff01"
    "736d616c6c0000000017ffffffff";
// SET small = 2: the new row only, the TOASTed `big` unchanged ('u').
constexpr std::string_view kUpdate = "55000040ab4e0004740000000131740000000463616c6d75740000000132";
// SET id = 2: the old key ('K') and the new row.
constexpr std::string_view kUpdateWithKey =
    "55000040ab4b00047400000001316e6e6e4e0004740000000132740000000463616c6d75740000000132";
// REPLICA IDENTITY FULL: the old row ('O') and the new one.
constexpr std::string_view kUpdateWithOldRow =
    "55000040ab4f0004740000000133740000000574656e73657400000001797400000001334e000474000000013374"
    "0000000574656e7365740000000179740000000134";
constexpr std::string_view kDeleteByKey = "44000040ab4b00047400000001326e6e6e";
constexpr std::string_view kDeleteByOldRow =
    "44000040ab4f0004740000000133740000000574656e7365740000000179740000000134";
constexpr std::string_view kTruncate = "540000000100000040ab";
// An insert under pg_replication_origin_session_setup('..._origin').
constexpr std::string_view kOrigin =
    "4f000000000000000074636865636b73616e64736b69707365766572796f746865726b696e64706f5f315f6f7269"
    "67696e00";
// START_REPLICATION ... LOGICAL 0/0 (proto_version '1', publication_names .., messages 'true'):
// a keepalive, the XLogData of a Begin, of a Relation (sent with WAL positions 0/0) and of a
// Commit.
constexpr std::string_view kKeepaliveFrame = "6b0000000001a131a80003048cf0e7ad2000";
constexpr std::string_view kBeginFrame =
    "770000000001a131a80000000001a131a80003048cf0e7b14d420000000001a132900003048cf0e74976000002f7";
constexpr std::string_view kRelationFrame =
    "77000000000000000000000000000000000003048cf0e7b33e520000415e7473747265616d736672616d65736164"
    "74616b65737374616e64627973745f33006364635f73747265616d006400020169640000000014ffffffff006e61"
    "6d650000000019ffffffff";
constexpr std::string_view kCommitFrame =
    "770000000001a132c00000000001a132c00003048cf0e7b47043000000000001a132900000000001a132c0000304"
    "8cf0e74976";
}  // namespace captured

// Every valid pgoutput message of this file, captured and built.
std::vector<std::string> valid_messages() {
  std::vector<std::string> messages;
  for (const std::string_view hex :
       {captured::kBegin, captured::kRelation, captured::kInsert, captured::kCommit,
        captured::kMessage, captured::kMessageWithNul, captured::kMessageNotTransactional,
        captured::kBinaryInsert, captured::kType, captured::kRelationFullIdentity,
        captured::kUpdate, captured::kUpdateWithKey, captured::kUpdateWithOldRow,
        captured::kDeleteByKey, captured::kDeleteByOldRow, captured::kTruncate,
        captured::kOrigin}) {
    messages.push_back(from_hex(hex));
  }
  Relation relation{42, "", "", 'n', {}};  // no columns, empty names: the shortest there is
  messages.push_back(wire::encode(relation));
  messages.push_back(wire::encode(Insert{
      42, {{ColumnKind::unchanged_toast, {}}, {ColumnKind::binary, ""}, {ColumnKind::text, "x"}}}));
  messages.push_back(wire::encode(LogicalMessage{0, 1, "", ""}));
  return messages;
}

// The value `decoded` holds (a copy: its views still point into the decoded bytes), or a
// failure and an empty value.
template <typename Alternative, typename Variant>
Alternative as(const Variant& decoded) {
  if (const auto* error = std::get_if<DecodeError>(&decoded)) ADD_FAILURE() << error->message;
  const auto* value = std::get_if<Alternative>(&decoded);
  EXPECT_NE(value, nullptr) << "decoded to another kind";
  return value != nullptr ? *value : Alternative{};
}

std::string error_of(const PgOutputMessage& decoded) {
  const auto* error = std::get_if<DecodeError>(&decoded);
  return error != nullptr ? error->message : "(decoded)";
}

std::string error_of(const CopyDataMessage& decoded) {
  const auto* error = std::get_if<DecodeError>(&decoded);
  return error != nullptr ? error->message : "(decoded)";
}

// ---- pgoutput, captured ----

TEST(Pgoutput, DecodesACapturedTransaction) {
  const std::string begin_bytes = from_hex(captured::kBegin);
  const auto begin = as<Begin>(decode_pgoutput(begin_bytes));
  EXPECT_EQ(begin.final_lsn, 0x195B708U);
  EXPECT_EQ(begin.commit_time, 0x0003048cf35ff37a);
  EXPECT_EQ(begin.xid, 729U);

  const std::string commit_bytes = from_hex(captured::kCommit);
  const auto commit = as<Commit>(decode_pgoutput(commit_bytes));
  EXPECT_EQ(commit.flags, 0);
  EXPECT_EQ(commit.commit_lsn, begin.final_lsn);
  EXPECT_EQ(commit.end_lsn, 0x195B738U);
  EXPECT_EQ(commit.commit_time, begin.commit_time);
}

TEST(Pgoutput, DecodesACapturedRelationAndFindsItsColumns) {
  const std::string bytes = from_hex(captured::kRelation);
  const auto relation = as<Relation>(decode_pgoutput(bytes));
  EXPECT_EQ(relation.relation_id, 0x404FU);
  EXPECT_EQ(relation.namespace_name, "tdecodesinsertsandmessagesaspos_0");
  EXPECT_EQ(relation.name, "cdc_events");
  EXPECT_EQ(relation.replica_identity, 'd');
  ASSERT_EQ(relation.columns.size(), 5U);
  EXPECT_EQ(relation.columns[0].name, "id");
  EXPECT_TRUE(relation.columns[0].is_key());
  EXPECT_EQ(relation.columns[0].type_oid, 20U);  // int8
  EXPECT_EQ(relation.columns[2].name, "payload");
  EXPECT_FALSE(relation.columns[2].is_key());
  EXPECT_EQ(relation.columns[2].type_oid, 3802U);  // jsonb
  EXPECT_EQ(relation.columns[4].name, "created_at");
  EXPECT_EQ(relation.columns[4].type_oid, 1184U);  // timestamptz
  EXPECT_EQ(relation.columns[4].type_modifier, -1);

  const auto found = find_columns(relation, {"payload", "id", "created_at"});
  EXPECT_EQ(std::get<std::vector<std::size_t>>(found), (std::vector<std::size_t>{2, 0, 4}));
  const auto missing = find_columns(relation, {"id", "event_id", "other"});
  const auto& error = std::get<MissingColumn>(missing);
  EXPECT_EQ(error.column, "event_id");
  EXPECT_TRUE(contains(error.message, "has no column \"event_id\"")) << error.message;
  EXPECT_TRUE(contains(error.message, "id, name, payload, note, created_at")) << error.message;
  EXPECT_TRUE(contains(error.message, "OID 16463")) << error.message;
}

TEST(Pgoutput, DecodesCapturedInsertsInTextAndInBinary) {
  const std::string bytes = from_hex(captured::kInsert);
  const auto insert = as<Insert>(decode_pgoutput(bytes));
  EXPECT_EQ(insert.relation_id, 0x404FU);
  ASSERT_EQ(insert.columns.size(), 5U);
  const std::vector<std::string> values{"1", "héllo, wörld", R"({"a": [1, 2]})", "",
                                        "2024-01-02 03:04:05.678901+00"};
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(insert.columns[i].kind, i == 3 ? ColumnKind::null : ColumnKind::text) << i;
    EXPECT_EQ(insert.columns[i].value, values[i]) << i;
  }

  const std::string binary_bytes = from_hex(captured::kBinaryInsert);
  const auto binary = as<Insert>(decode_pgoutput(binary_bytes));
  ASSERT_EQ(binary.columns.size(), 4U);
  EXPECT_EQ(binary.columns[0].kind, ColumnKind::binary);
  EXPECT_EQ(binary.columns[0].value, std::string("\0\0\0\0\0\0\0\x07", 8));  // int8send
  EXPECT_EQ(binary.columns[1].value, std::string("\x01", 1));                // boolsend
  EXPECT_EQ(binary.columns[2].value, "seven");
  EXPECT_EQ(binary.columns[3].kind, ColumnKind::null);
}

TEST(Pgoutput, DecodesCapturedMessages) {
  const std::string bytes = from_hex(captured::kMessage);
  const auto message = as<LogicalMessage>(decode_pgoutput(bytes));
  EXPECT_TRUE(message.transactional());
  EXPECT_EQ(message.lsn, 0x195B780U);
  EXPECT_EQ(message.prefix, "outbox");
  EXPECT_EQ(message.content, "event 'one'");

  const std::string nul_bytes = from_hex(captured::kMessageWithNul);
  EXPECT_EQ(as<LogicalMessage>(decode_pgoutput(nul_bytes)).content, std::string("\0\xff\x61", 3));

  const std::string plain_bytes = from_hex(captured::kMessageNotTransactional);
  const auto plain = as<LogicalMessage>(decode_pgoutput(plain_bytes));
  EXPECT_FALSE(plain.transactional());
  EXPECT_EQ(plain.prefix, "outbox-now");
  EXPECT_EQ(plain.content, "not transactional");
}

TEST(Pgoutput, ChecksAndSkipsEveryCapturedKindTheRelayIgnores) {
  // Updates decode (a table-less relay reads the sequence counters'), with their old tuple.
  EXPECT_EQ(as<Update>(decode_pgoutput(from_hex(captured::kUpdate))).old_kind, 0);
  EXPECT_EQ(as<Update>(decode_pgoutput(from_hex(captured::kUpdateWithKey))).old_kind, 'K');
  EXPECT_EQ(as<Update>(decode_pgoutput(from_hex(captured::kUpdateWithOldRow))).old_kind, 'O');
  for (const std::string_view hex :
       {captured::kUpdate, captured::kUpdateWithKey, captured::kUpdateWithOldRow}) {
    const std::string bytes = from_hex(hex);
    EXPECT_EQ(wire::encode(as<Update>(decode_pgoutput(bytes))), bytes) << hex;
  }
  const std::vector<std::pair<std::string_view, char>> cases{{captured::kDeleteByKey, 'D'},
                                                             {captured::kDeleteByOldRow, 'D'},
                                                             {captured::kTruncate, 'T'},
                                                             {captured::kType, 'Y'},
                                                             {captured::kOrigin, 'O'}};
  for (const auto& [hex, kind] : cases) {
    const std::string bytes = from_hex(hex);
    EXPECT_EQ(as<Ignored>(decode_pgoutput(bytes)).kind, kind) << hex;
  }
  const std::string relation_bytes = from_hex(captured::kRelationFullIdentity);
  const auto relation = as<Relation>(decode_pgoutput(relation_bytes));
  EXPECT_EQ(relation.replica_identity, 'f');
  for (const RelationColumn& column : relation.columns) EXPECT_TRUE(column.is_key()) << column.name;
}

// What decodes encodes back to the captured bytes: no byte is skipped or read twice.
TEST(Pgoutput, CapturedMessagesEncodeBackToTheirBytes) {
  for (const std::string_view hex :
       {captured::kBegin, captured::kRelation, captured::kInsert, captured::kCommit,
        captured::kMessage, captured::kBinaryInsert, captured::kRelationFullIdentity}) {
    const std::string bytes = from_hex(hex);
    const PgOutputMessage decoded = decode_pgoutput(bytes);
    std::visit(
        [&](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, DecodeError> || std::is_same_v<T, Ignored>) {
            ADD_FAILURE() << hex;
          } else {
            EXPECT_EQ(wire::encode(value), bytes) << hex;
          }
        },
        decoded);
  }
}

// ---- pgoutput, built ----

TEST(Pgoutput, DecodesEveryColumnKind) {
  const std::string bytes =
      wire::encode(Insert{7,
                          {{ColumnKind::null, {}},
                           {ColumnKind::unchanged_toast, {}},
                           {ColumnKind::text, "abc"},
                           {ColumnKind::binary, std::string_view("\0\x01", 2)},
                           {ColumnKind::text, ""}}});
  const auto insert = as<Insert>(decode_pgoutput(bytes));
  ASSERT_EQ(insert.columns.size(), 5U);
  EXPECT_EQ(insert.columns[0].kind, ColumnKind::null);
  EXPECT_EQ(insert.columns[1].kind, ColumnKind::unchanged_toast);
  EXPECT_EQ(insert.columns[2].value, "abc");
  EXPECT_EQ(insert.columns[3].kind, ColumnKind::binary);
  EXPECT_EQ(insert.columns[3].value, std::string_view("\0\x01", 2));
  EXPECT_EQ(insert.columns[4].kind, ColumnKind::text);
  EXPECT_EQ(insert.columns[4].value, "");
}

TEST(Pgoutput, RefusesWhatPostgres15NeverSendsAndSaysWhere) {
  EXPECT_TRUE(
      contains(error_of(decode_pgoutput(wire::Writer('C').u8(1).u64(1).u64(2).i64(3).done())),
               "pgoutput Commit: unknown flags 1"));
  EXPECT_TRUE(contains(error_of(decode_pgoutput(wire::Writer('B').u64(0).i64(1).u32(2).done())),
                       "the final LSN is 0"));
  const std::string relation =
      wire::Writer('R').u32(1).cstring("s").cstring("t").u8('x').u16(0).done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(relation)), "unknown replica identity 'x' (0x78)"));
  const std::string insert = wire::Writer('I').u32(1).u8('N').u16(2).u8('n').u8('z').done();
  EXPECT_EQ(error_of(decode_pgoutput(insert)),
            "pgoutput Insert: unknown column kind 'z' (0x7a); expected 'n', 'u', 't' or 'b' "
            "(column 1) at byte 10");
  const std::string old_tuple = wire::Writer('I').u32(1).u8('O').u16(0).done();
  EXPECT_TRUE(
      contains(error_of(decode_pgoutput(old_tuple)), "tuple marker 'O' (0x4f), expected 'N'"));
  const std::string negative = wire::Writer('I').u32(1).u8('N').u16(1).u8('t').i32(-1).done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(negative)), "negative value length -1 (column 0)"));
  const std::string update = wire::Writer('U').u32(1).u8('X').done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(update)), "expected 'K' or 'O' or 'N'"));
  const std::string delete_new = wire::Writer('D').u32(1).u8('N').u16(0).done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(delete_new)), "expected 'K' or 'O'"));
  const std::string update_twice = wire::Writer('U').u32(1).u8('K').u16(0).u8('K').u16(0).done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(update_twice)), "expected 'N'"));
}

TEST(Pgoutput, DecodesUpdatesOfEveryShapeAndDeletesAsIgnored) {
  const std::string new_only = wire::Writer('U').u32(1).u8('N').u16(1).u8('u').done();
  const std::string with_key = wire::Writer('U')
                                   .u32(7)
                                   .u8('K')
                                   .u16(1)
                                   .u8('n')
                                   .u8('N')
                                   .u16(2)
                                   .u8('n')
                                   .u8('t')
                                   .u32(2)
                                   .raw("42")
                                   .done();
  const Update plain = as<Update>(decode_pgoutput(new_only));
  EXPECT_EQ(plain.relation_id, 1U);
  ASSERT_EQ(plain.columns.size(), 1U);
  EXPECT_EQ(plain.columns[0].kind, ColumnKind::unchanged_toast);
  const Update keyed = as<Update>(decode_pgoutput(with_key));
  EXPECT_EQ(keyed.relation_id, 7U);
  EXPECT_EQ(keyed.old_kind, 'K');
  ASSERT_EQ(keyed.old_columns.size(), 1U);
  ASSERT_EQ(keyed.columns.size(), 2U);
  EXPECT_EQ(keyed.columns[1].value, "42");
  EXPECT_EQ(wire::encode(keyed), with_key);
  const std::string deleted =
      wire::Writer('D').u32(1).u8('O').u16(1).u8('t').u32(1).raw("x").done();
  const std::string truncated = wire::Writer('T').u32(2).u8(3).u32(10).u32(11).done();
  const std::string type = wire::Writer('Y').u32(9).cstring("").cstring("t").done();
  const std::string origin = wire::Writer('O').u64(5).cstring("o").done();
  for (const std::string* bytes : {&deleted, &truncated, &type, &origin}) {
    EXPECT_EQ(as<Ignored>(decode_pgoutput(*bytes)).kind, bytes->front());
  }
}

TEST(Pgoutput, AnUnknownFirstByteIsAnErrorNamingIt) {
  EXPECT_TRUE(contains(error_of(decode_pgoutput("X")), "unknown message type 'X' (0x58)"));
  EXPECT_TRUE(contains(error_of(decode_pgoutput(std::string(1, '\0'))), "message type 0x00"));
  EXPECT_TRUE(contains(error_of(decode_pgoutput("\x1b[2J")), "message type 0x1b;"));
  EXPECT_TRUE(contains(error_of(decode_pgoutput("S")), "a stream start (protocol version 2)"));
  EXPECT_TRUE(contains(error_of(decode_pgoutput("P")), "a prepare (protocol version 3)"));
  EXPECT_TRUE(contains(error_of(decode_pgoutput("")), "empty"));
}

TEST(Pgoutput, BytesAfterTheMessageAreRefused) {
  const std::string bytes = from_hex(captured::kBegin) + "x";
  EXPECT_EQ(error_of(decode_pgoutput(bytes)),
            "pgoutput Begin: 1 unexpected bytes after the end of the message at byte 21");
}

TEST(Pgoutput, AStringWithoutItsNulIsRefused) {
  const std::string bytes = wire::Writer('R').u32(1).raw("public").done();
  EXPECT_EQ(error_of(decode_pgoutput(bytes)),
            "pgoutput Relation: the namespace has no terminating NUL (6 bytes left) at byte 5");
  const std::string prefix = wire::Writer('M').u8(1).u64(1).raw("outbox").done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(prefix)), "the prefix has no terminating NUL"));
}

// A count no input of this size can hold fails at once, before anything is reserved for it.
TEST(Pgoutput, HostileCountsFailFast) {
  const std::string relation =
      wire::Writer('R').u32(1).cstring("").cstring("").u8('d').u16(65535).u8(0).done();
  ASSERT_LE(relation.size(), 12U);
  EXPECT_EQ(error_of(decode_pgoutput(relation)),
            "pgoutput Relation: 65535 columns declared but only 1 bytes left (each takes at least "
            "10) at byte 10");
  const std::string insert = wire::Writer('I').u32(1).u8('N').u16(65535).raw("nnn").done();
  EXPECT_TRUE(
      contains(error_of(decode_pgoutput(insert)), "65535 columns declared but only 3 bytes left"));
  const std::string truncate = wire::Writer('T').u32(0xFFFFFFFF).u8(0).u32(1).done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(truncate)),
                       "4294967295 relation ids declared but only 4 bytes left"));
  const std::string message =
      wire::Writer('M').u8(1).u64(1).cstring("p").u32(0xFFFFFFFF).raw("abc").done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(message)),
                       "truncated reading the content (4294967295 bytes needed, 3 left)"));
  const std::string value = wire::Writer('I').u32(1).u8('N').u16(1).u8('t').i32(0x7FFFFFFF).done();
  EXPECT_TRUE(contains(error_of(decode_pgoutput(value)),
                       "truncated reading the value (2147483647 bytes needed, 0 left) (column 0)"));
}

// Every proper prefix of `bytes`, each copied into a heap block of exactly its size, decodes to a
// DecodeError that points inside it.
template <typename Decode>
void expect_every_prefix_refused(std::string_view bytes, Decode decode) {
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    const auto block = std::make_unique<char[]>(size);
    std::memcpy(block.get(), bytes.data(), size);
    const auto decoded = decode(std::string_view(block.get(), size));
    const auto* error = std::get_if<DecodeError>(&decoded);
    ASSERT_NE(error, nullptr) << "the first " << size << " of " << bytes.size() << " bytes decoded";
    EXPECT_LE(error->offset, size);
    EXPECT_FALSE(error->message.empty());
  }
}

TEST(Pgoutput, EveryTruncationOfEveryMessageIsAnError) {
  const std::vector<std::string> messages = valid_messages();
  for (const std::string& message : messages) {
    SCOPED_TRACE(::testing::PrintToString(message));
    ASSERT_FALSE(std::holds_alternative<DecodeError>(decode_pgoutput(message)));
    expect_every_prefix_refused(message, decode_pgoutput);
  }
}

// ---- Framing ----

TEST(CopyData, DecodesCapturedFrames) {
  const std::string keepalive_bytes = from_hex(captured::kKeepaliveFrame);
  const auto keepalive = as<PrimaryKeepalive>(decode_copy_data(keepalive_bytes));
  EXPECT_EQ(keepalive.wal_end, 0x1A131A8U);
  EXPECT_EQ(keepalive.send_time, 0x0003048cf0e7ad20);
  EXPECT_FALSE(keepalive.reply_requested);

  const std::string begin_bytes = from_hex(captured::kBeginFrame);
  const auto begin = as<XLogData>(decode_copy_data(begin_bytes));
  EXPECT_EQ(begin.wal_start, 0x1A131A8U);
  EXPECT_EQ(begin.wal_end, 0x1A131A8U);
  EXPECT_EQ(begin.send_time, 0x0003048cf0e7b14d);
  EXPECT_EQ(as<Begin>(decode_pgoutput(begin.payload)).xid, 0x2F7U);

  const std::string relation_bytes = from_hex(captured::kRelationFrame);
  const auto relation = as<XLogData>(decode_copy_data(relation_bytes));
  EXPECT_EQ(relation.wal_start, 0U);  // PostgreSQL 15 sends a Relation with no WAL position
  EXPECT_EQ(as<Relation>(decode_pgoutput(relation.payload)).name, "cdc_stream");

  const std::string commit_bytes = from_hex(captured::kCommitFrame);
  const auto commit = as<XLogData>(decode_copy_data(commit_bytes));
  EXPECT_EQ(commit.wal_start, as<Commit>(decode_pgoutput(commit.payload)).end_lsn);
}

TEST(CopyData, DecodesBuiltFramesAndRefusesMalformedOnes) {
  const std::string empty_payload = wire::encode(XLogData{1, 2, 3, {}});
  EXPECT_EQ(as<XLogData>(decode_copy_data(empty_payload)).payload, "");
  const std::string asking = wire::encode(PrimaryKeepalive{9, 8, true});
  EXPECT_TRUE(as<PrimaryKeepalive>(decode_copy_data(asking)).reply_requested);

  EXPECT_TRUE(contains(error_of(decode_copy_data(asking + "x")), "1 unexpected bytes"));
  std::string flag_two = asking;
  flag_two.back() = 2;
  EXPECT_TRUE(
      contains(error_of(decode_copy_data(flag_two)), "the reply-requested flag is 2, not 0 or 1"));
  EXPECT_EQ(error_of(decode_copy_data("d")),
            "CopyData: unknown message type 'd' (0x64); expected 'w' (XLogData) or 'k' (primary "
            "keepalive)");
  EXPECT_TRUE(contains(error_of(decode_copy_data("")), "empty"));
  EXPECT_TRUE(contains(error_of(decode_copy_data(empty_payload.substr(0, 20))),
                       "XLogData: truncated reading the send time (8 bytes needed, 3 left)"));
}

TEST(CopyData, EveryTruncationOfAHeaderIsAnError) {
  for (const std::string_view hex : {captured::kKeepaliveFrame, captured::kBeginFrame,
                                     captured::kRelationFrame, captured::kCommitFrame}) {
    const std::string frame = from_hex(hex);
    // An XLogData's payload is whatever follows its 25 header bytes: only the header can be cut.
    const std::size_t header = frame.front() == 'w' ? 25 : frame.size();
    expect_every_prefix_refused(std::string_view(frame).substr(0, header), decode_copy_data);
    if (frame.front() == 'w') {
      const std::string payload(as<XLogData>(decode_copy_data(frame)).payload);
      expect_every_prefix_refused(payload, decode_pgoutput);
    }
  }
}

TEST(StandbyStatusUpdate, HasPostgresLayoutAndRoundTrips) {
  const StandbyStatusUpdate update{0x0102030405060708, 0x1112131415161718, 0, 0x0003048cf35ff37a,
                                   true};
  const auto bytes = encode_standby_status_update(update);
  const std::string_view encoded(bytes.data(), bytes.size());
  EXPECT_EQ(encoded, from_hex("72"
                              "0102030405060708"
                              "1112131415161718"
                              "0000000000000000"
                              "0003048cf35ff37a"
                              "01"));
  const auto decoded = as<StandbyStatusUpdate>(decode_standby_status_update(encoded));
  EXPECT_EQ(decoded.written, update.written);
  EXPECT_EQ(decoded.flushed, update.flushed);
  EXPECT_EQ(decoded.applied, update.applied);
  EXPECT_EQ(decoded.clock, update.clock);
  EXPECT_TRUE(decoded.reply_requested);

  const StandbyStatusUpdate negative_clock{1, 1, 1, -5, false};
  const auto second = encode_standby_status_update(negative_clock);
  const std::string_view second_bytes(second.data(), second.size());
  EXPECT_EQ(as<StandbyStatusUpdate>(decode_standby_status_update(second_bytes)).clock, -5);
  EXPECT_EQ(second.back(), 0);
  expect_every_prefix_refused(encoded, decode_standby_status_update);
}

TEST(StandbyStatusUpdate, ClockAndLsnHelpers) {
  using std::chrono::system_clock;
  EXPECT_EQ(to_pg_timestamp(system_clock::time_point{}), -946'684'800'000'000);
  EXPECT_EQ(to_pg_timestamp(system_clock::time_point{std::chrono::seconds(946'684'800)} +
                            std::chrono::microseconds(1)),
            1);
  EXPECT_EQ(format_lsn(0x16B374D848), "16/B374D848");
  EXPECT_EQ(format_lsn(0), "0/0");
  // The text the table path's horizon is written as: UTC, microseconds, before 2000 and 1970 too.
  EXPECT_EQ(format_pg_timestamp(0), "2000-01-01 00:00:00.000000+00");
  EXPECT_EQ(format_pg_timestamp(-1), "1999-12-31 23:59:59.999999+00");
  EXPECT_EQ(format_pg_timestamp(to_pg_timestamp(system_clock::time_point{}) - 1),
            "1969-12-31 23:59:59.999999+00");
  EXPECT_EQ(format_pg_timestamp(849'440'201'000'123), "2026-12-01 11:36:41.000123+00");
}

TEST(FindColumns, EscapesWhatItQuotes) {
  Relation relation{5, "s", "t\x1b[2J", 'd', {}};
  relation.columns.push_back({0, "a\nb", 25, -1});
  const auto missing = find_columns(relation, {"x\x1b"});
  const auto& error = std::get<MissingColumn>(missing);
  EXPECT_EQ(error.message.find('\x1b'), std::string::npos) << error.message;
  EXPECT_EQ(error.message.find('\n'), std::string::npos) << error.message;
  EXPECT_EQ(std::get<std::vector<std::size_t>>(find_columns(relation, {})).size(), 0U);
}

}  // namespace
}  // namespace outbox::cdc
