// pgoutput's logical replication messages, protocol version 1 (pgoutput.hpp), and a relation's
// columns by name. No I/O. The CopyData messages around them: copy_data.cpp.

#include "cdc/pgoutput.hpp"

#include <fmt/format.h>

#include <utility>

#include "cdc/wire_reader.hpp"
#include "common/printable.hpp"

// Layouts: PostgreSQL 15, src/backend/replication/logical/proto.c (logicalrep_write_*), as
// documented in "Logical Replication Message Formats".

namespace outbox::cdc {
namespace {

// The least a Relation's column takes: flags, an empty name's NUL, type OID, type modifier.
constexpr std::size_t kMinRelationColumnBytes = 1 + 1 + 4 + 4;
// The least a TupleData column takes: its kind byte ('n' or 'u').
constexpr std::size_t kMinTupleColumnBytes = 1;
constexpr std::size_t kMaxNamesListed = 20;

// One TupleData: Int16 count, then per column a kind byte and, for 't' and 'b', an Int32 length
// and that many bytes. Stores the columns in `columns` unless it is null (a message that is only
// checked).
bool read_tuple(Reader& in, std::vector<TupleColumn>* columns) {
  std::uint16_t count = 0;
  in.u16(count, "the column count");
  if (!in.count_fits(count, kMinTupleColumnBytes, "columns")) return false;
  if (columns != nullptr) columns->reserve(count);
  for (std::uint16_t i = 0; i < count && in.ok(); ++i) {
    in.at_column(i);
    TupleColumn column;
    std::uint8_t kind = 0;
    in.u8(kind, "the column's kind");
    switch (kind) {
      case 'n':
      case 'u':
        break;
      case 't':
      case 'b': {
        std::int32_t length = 0;
        if (in.i32(length, "the value's length") && length < 0) {
          in.fail(fmt::format("negative value length {}", length));
        }
        if (in.ok()) in.bytes(static_cast<std::size_t>(length), column.value, "the value");
        break;
      }
      default:
        if (in.ok()) {
          in.fail(fmt::format("unknown column kind {}; expected 'n', 'u', 't' or 'b'",
                              describe_byte(kind)));
        }
    }
    column.kind = static_cast<ColumnKind>(kind);
    if (columns != nullptr && in.ok()) columns->push_back(column);
  }
  in.at_column(-1);
  return in.ok();
}

PgOutputMessage decode_begin(Reader& in) {
  Begin begin;
  in.u64(begin.final_lsn, "the final LSN");
  in.i64(begin.commit_time, "the commit time");
  in.u32(begin.xid, "the xid");
  if (in.ok() && begin.final_lsn == 0) in.fail("the final LSN is 0 (not set)");
  if (!in.finish()) return in.error();
  return begin;
}

PgOutputMessage decode_commit(Reader& in) {
  Commit commit;
  if (in.u8(commit.flags, "the flags") && commit.flags != 0) {
    in.fail(fmt::format("unknown flags {} (PostgreSQL 15 sends 0)", commit.flags));
  }
  in.u64(commit.commit_lsn, "the commit LSN");
  in.u64(commit.end_lsn, "the end LSN");
  in.i64(commit.commit_time, "the commit time");
  if (!in.finish()) return in.error();
  return commit;
}

bool read_relation_columns(Reader& in, std::vector<RelationColumn>& columns) {
  std::uint16_t count = 0;
  in.u16(count, "the column count");
  if (!in.count_fits(count, kMinRelationColumnBytes, "columns")) return false;
  columns.reserve(count);
  for (std::uint16_t i = 0; i < count && in.ok(); ++i) {
    in.at_column(i);
    RelationColumn column;
    std::string_view name;
    in.u8(column.flags, "the column's flags");
    in.cstring(name, "the column's name");
    in.u32(column.type_oid, "the column's type OID");
    in.i32(column.type_modifier, "the column's type modifier");
    column.name = name;
    if (in.ok()) columns.push_back(std::move(column));
  }
  in.at_column(-1);
  return in.ok();
}

PgOutputMessage decode_relation(Reader& in) {
  Relation relation;
  std::string_view namespace_name;
  std::string_view name;
  std::uint8_t identity = 0;
  in.u32(relation.relation_id, "the relation id");
  in.cstring(namespace_name, "the namespace");
  in.cstring(name, "the relation name");
  if (in.u8(identity, "the replica identity") && identity != 'd' && identity != 'n' &&
      identity != 'f' && identity != 'i') {
    in.fail(fmt::format("unknown replica identity {}; expected 'd', 'n', 'f' or 'i'",
                        describe_byte(identity)));
  }
  read_relation_columns(in, relation.columns);
  if (!in.finish()) return in.error();
  relation.namespace_name = namespace_name;
  relation.name = name;
  relation.replica_identity = static_cast<char>(identity);
  return relation;
}

// Reads the tuple marker byte and checks it is one of `expected` (e.g. "N", "KON").
bool read_marker(Reader& in, std::uint8_t& marker, std::string_view expected) {
  if (!in.u8(marker, "the tuple marker")) return false;
  if (expected.find(static_cast<char>(marker)) != std::string_view::npos) return true;
  std::string listed;
  for (const char c : expected) listed += fmt::format("{}'{}'", listed.empty() ? "" : " or ", c);
  return in.fail(fmt::format("tuple marker {}, expected {}", describe_byte(marker), listed));
}

PgOutputMessage decode_insert(Reader& in) {
  Insert insert;
  std::uint8_t marker = 0;
  in.u32(insert.relation_id, "the relation id");
  read_marker(in, marker, "N");
  read_tuple(in, &insert.columns);
  if (!in.finish()) return in.error();
  return insert;
}

PgOutputMessage decode_message(Reader& in) {
  LogicalMessage message;
  std::uint32_t length = 0;
  in.u8(message.flags, "the flags");
  in.u64(message.lsn, "the LSN");
  in.cstring(message.prefix, "the prefix");
  in.u32(length, "the content length");
  in.bytes(length, message.content, "the content");
  if (!in.finish()) return in.error();
  return message;
}

// Update: relation id, optionally 'K' (old key) or 'O' (old row) and a tuple, then 'N' and the
// new tuple.
PgOutputMessage decode_update(Reader& in) {
  Update update;
  std::uint8_t marker = 0;
  in.u32(update.relation_id, "the relation id");
  if (read_marker(in, marker, "KON") && marker != 'N') {
    update.old_kind = static_cast<char>(marker);
    read_tuple(in, &update.old_columns);
    read_marker(in, marker, "N");
  }
  read_tuple(in, &update.columns);
  if (!in.finish()) return in.error();
  return update;
}

PgOutputMessage check_delete(Reader& in) {
  std::uint32_t relation_id = 0;
  std::uint8_t marker = 0;
  in.u32(relation_id, "the relation id");
  read_marker(in, marker, "KO");
  read_tuple(in, nullptr);
  if (!in.finish()) return in.error();
  return Ignored{'D'};
}

PgOutputMessage check_truncate(Reader& in) {
  std::uint32_t count = 0;
  std::uint8_t flags = 0;
  std::string_view relation_ids;
  in.u32(count, "the relation count");
  in.u8(flags, "the flags");
  if (in.count_fits(count, 4, "relation ids")) {
    in.bytes(std::size_t{count} * 4, relation_ids, "the relation ids");
  }
  if (!in.finish()) return in.error();
  return Ignored{'T'};
}

PgOutputMessage check_type(Reader& in) {
  std::uint32_t type_oid = 0;
  std::string_view namespace_name;
  std::string_view name;
  in.u32(type_oid, "the type OID");
  in.cstring(namespace_name, "the namespace");
  in.cstring(name, "the type name");
  if (!in.finish()) return in.error();
  return Ignored{'Y'};
}

PgOutputMessage check_origin(Reader& in) {
  std::uint64_t lsn = 0;
  std::string_view name;
  in.u64(lsn, "the origin's commit LSN");
  in.cstring(name, "the origin name");
  if (!in.finish()) return in.error();
  return Ignored{'O'};
}

struct MessageKind {
  char byte;
  std::string_view name;
  PgOutputMessage (*decode)(Reader&);
};

constexpr MessageKind kMessageKinds[] = {
    {'B', "pgoutput Begin", decode_begin},       {'C', "pgoutput Commit", decode_commit},
    {'R', "pgoutput Relation", decode_relation}, {'I', "pgoutput Insert", decode_insert},
    {'M', "pgoutput Message", decode_message},   {'U', "pgoutput Update", decode_update},
    {'D', "pgoutput Delete", check_delete},      {'T', "pgoutput Truncate", check_truncate},
    {'Y', "pgoutput Type", check_type},          {'O', "pgoutput Origin", check_origin},
};

// First bytes of the messages of later protocol versions, which version 1 never sends.
constexpr std::pair<char, std::string_view> kLaterProtocolKinds[] = {
    {'S', "a stream start (protocol version 2)"},
    {'E', "a stream stop (protocol version 2)"},
    {'c', "a stream commit (protocol version 2)"},
    {'A', "a stream abort (protocol version 2)"},
    {'b', "a begin prepare (protocol version 3)"},
    {'P', "a prepare (protocol version 3)"},
    {'K', "a commit prepared (protocol version 3)"},
    {'r', "a rollback prepared (protocol version 3)"},
    {'p', "a stream prepare (protocol version 3)"},
};

DecodeError unknown_kind(unsigned char kind) {
  std::string what;
  for (const auto& [byte, description] : kLaterProtocolKinds) {
    if (static_cast<unsigned char>(byte) == kind) what = fmt::format(", {}", description);
  }
  return DecodeError{fmt::format("pgoutput: unknown message type {}{}; protocol version 1 sends "
                                 "B, C, R, I, U, D, T, Y, O and M",
                                 describe_byte(kind), what),
                     0};
}

}  // namespace

PgOutputMessage decode_pgoutput(std::string_view bytes) {
  if (bytes.empty()) return DecodeError{"pgoutput: an empty message", 0};
  const auto kind = static_cast<unsigned char>(bytes.front());
  for (const MessageKind& known : kMessageKinds) {
    if (static_cast<unsigned char>(known.byte) != kind) continue;
    Reader in(bytes, known.name, 1);
    return known.decode(in);
  }
  return unknown_kind(kind);
}

std::variant<std::vector<std::size_t>, MissingColumn> find_columns(
    const Relation& relation, const std::vector<std::string>& wanted) {
  std::vector<std::size_t> positions;
  positions.reserve(wanted.size());
  for (const std::string& name : wanted) {
    std::size_t position = 0;
    while (position < relation.columns.size() && relation.columns[position].name != name) {
      ++position;
    }
    if (position < relation.columns.size()) {
      positions.push_back(position);
      continue;
    }
    std::string present;
    for (std::size_t i = 0; i < relation.columns.size() && i < kMaxNamesListed; ++i) {
      present += (i == 0 ? "" : ", ") + detail::printable(relation.columns[i].name, 100);
    }
    if (relation.columns.size() > kMaxNamesListed) present += ", ...";
    return MissingColumn{
        name, fmt::format("relation {}.{} (OID {}) has no column \"{}\"; its columns: {}",
                          detail::printable(relation.namespace_name, 100),
                          detail::printable(relation.name, 100), relation.relation_id,
                          detail::printable(name, 100), present.empty() ? "none" : present)};
  }
  return positions;
}

}  // namespace outbox::cdc
