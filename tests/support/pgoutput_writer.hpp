#pragma once
// The other direction of src/cdc/pgoutput.hpp, for tests only: the bytes a walsender running
// pgoutput (protocol version 1) would send for a message, written field by field as
// PostgreSQL 15's proto.c and walsender.c write them. The unit tests build synthetic messages with
// it; the fuzz target checks that whatever decodes encodes back to the very same bytes.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cdc/pgoutput.hpp"

namespace outbox::cdc::wire {

class Writer {
 public:
  explicit Writer(char kind) { bytes_.push_back(kind); }
  Writer& u8(std::uint8_t value) { return unsigned_int(value, 1); }
  Writer& u16(std::uint16_t value) { return unsigned_int(value, 2); }
  Writer& u32(std::uint32_t value) { return unsigned_int(value, 4); }
  Writer& u64(std::uint64_t value) { return unsigned_int(value, 8); }
  Writer& i32(std::int32_t value) { return u32(static_cast<std::uint32_t>(value)); }
  Writer& i64(std::int64_t value) { return u64(static_cast<std::uint64_t>(value)); }
  Writer& cstring(std::string_view text) {
    bytes_.append(text);
    bytes_.push_back('\0');
    return *this;
  }
  Writer& raw(std::string_view bytes) {
    bytes_.append(bytes);
    return *this;
  }
  [[nodiscard]] std::string done() const { return bytes_; }

 private:
  Writer& unsigned_int(std::uint64_t value, int width) {
    for (int i = width - 1; i >= 0; --i) {
      bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    }
    return *this;
  }
  std::string bytes_;
};

inline std::string encode(const XLogData& data) {
  return Writer('w')
      .u64(data.wal_start)
      .u64(data.wal_end)
      .i64(data.send_time)
      .raw(data.payload)
      .done();
}

inline std::string encode(const PrimaryKeepalive& keepalive) {
  return Writer('k')
      .u64(keepalive.wal_end)
      .i64(keepalive.send_time)
      .u8(keepalive.reply_requested ? 1 : 0)
      .done();
}

inline std::string encode(const Begin& begin) {
  return Writer('B').u64(begin.final_lsn).i64(begin.commit_time).u32(begin.xid).done();
}

inline std::string encode(const Commit& commit) {
  return Writer('C')
      .u8(commit.flags)
      .u64(commit.commit_lsn)
      .u64(commit.end_lsn)
      .i64(commit.commit_time)
      .done();
}

inline std::string encode(const Relation& relation) {
  Writer out('R');
  out.u32(relation.relation_id).cstring(relation.namespace_name).cstring(relation.name);
  out.u8(static_cast<std::uint8_t>(relation.replica_identity));
  out.u16(static_cast<std::uint16_t>(relation.columns.size()));
  for (const RelationColumn& column : relation.columns) {
    out.u8(column.flags).cstring(column.name).u32(column.type_oid).i32(column.type_modifier);
  }
  return out.done();
}

inline void write_tuple(Writer& out, const std::vector<TupleColumn>& columns) {
  out.u16(static_cast<std::uint16_t>(columns.size()));
  for (const TupleColumn& column : columns) {
    out.u8(static_cast<std::uint8_t>(column.kind));
    if (column.kind == ColumnKind::text || column.kind == ColumnKind::binary) {
      out.u32(static_cast<std::uint32_t>(column.value.size())).raw(column.value);
    }
  }
}

inline std::string encode(const Insert& insert) {
  Writer out('I');
  out.u32(insert.relation_id).u8('N');
  write_tuple(out, insert.columns);
  return out.done();
}

inline std::string encode(const Update& update) {
  Writer out('U');
  out.u32(update.relation_id);
  if (update.old_kind != 0) {
    out.u8(static_cast<std::uint8_t>(update.old_kind));
    write_tuple(out, update.old_columns);
  }
  out.u8('N');
  write_tuple(out, update.columns);
  return out.done();
}

inline std::string encode(const LogicalMessage& message) {
  return Writer('M')
      .u8(message.flags)
      .u64(message.lsn)
      .cstring(message.prefix)
      .u32(static_cast<std::uint32_t>(message.content.size()))
      .raw(message.content)
      .done();
}

// A decoded message's kind letter, as on the wire ('!' for a DecodeError): for tests that list
// what a stream brought.
inline char kind_of(const PgOutputMessage& message) {
  struct Visitor {
    char operator()(const Begin&) const { return 'B'; }
    char operator()(const Commit&) const { return 'C'; }
    char operator()(const Relation&) const { return 'R'; }
    char operator()(const Insert&) const { return 'I'; }
    char operator()(const Update&) const { return 'U'; }
    char operator()(const LogicalMessage&) const { return 'M'; }
    char operator()(const Ignored& ignored) const { return ignored.kind; }
    char operator()(const DecodeError&) const { return '!'; }
  };
  return std::visit(Visitor{}, message);
}

}  // namespace outbox::cdc::wire
