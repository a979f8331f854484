#pragma once
// The decoder half of the change-data-capture relay: what a walsender running the built-in
// `pgoutput` plugin sends, as values. No I/O; nothing here touches libpq.
//
// Two layers, each one function:
//  - decode_copy_data: one CopyData message of the streaming replication protocol (XLogData 'w'
//    or primary keepalive 'k'); encode_standby_status_update builds the client's 'r' answer.
//  - decode_pgoutput: one pgoutput message (the payload of an XLogData, or one row's `data` of
//    pg_logical_slot_{get,peek}_binary_changes), protocol version 1 with messages 'true', as
//    PostgreSQL 15 writes it (src/backend/replication/logical/proto.c).
// Every integer on the wire is big-endian.
//
// The bytes come from outside. Both decoders read only inside the given buffer, never throw,
// allocate at most in proportion to the input (a count is checked against the bytes left before
// anything is reserved), and answer every malformed, truncated or overlong input with a
// DecodeError naming the message, the field and the byte offset (fuzzed:
// tests/fuzz/pgoutput_fuzz.cpp). A message must fill its buffer exactly: each CopyData carries one
// message, so bytes left over mean the layout was misread and are refused.
//
// Lifetime: every std::string_view in a result (XLogData::payload, TupleColumn::value,
// LogicalMessage::prefix and content) points into the buffer that was decoded and is valid only
// as long as that buffer. Relation owns its strings, since the relay keeps it for the stream's
// life.
//
// Thread safety: the functions are pure; call them from any thread.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace outbox::cdc {

// A WAL position (XLogRecPtr).
using Lsn = std::uint64_t;
// PostgreSQL's TimestampTz: microseconds since 2000-01-01 00:00:00 UTC.
using PgTimestamp = std::int64_t;

// What is wrong with an input and where. `message` is safe to print (outside text in it is
// escaped) and names the message kind and field, e.g. "pgoutput Insert: truncated at byte 5
// reading the relation id (4 bytes needed, 2 left)".
struct DecodeError {
  std::string message;
  std::size_t offset = 0;  // the byte of the input where decoding stopped
};

// ---- Streaming replication protocol (CopyData payloads in COPY BOTH mode) ----

// 'w': a piece of WAL; for logical replication, exactly one pgoutput message.
struct XLogData {
  // The WAL position of the change `payload` describes (Begin: the transaction's first record;
  // Commit: the end of the commit record). 0 for a Relation message (PostgreSQL 15 sends 0/0
  // there), so do not take it as progress; confirm Commit::end_lsn instead.
  Lsn wal_start = 0;
  Lsn wal_end = 0;  // for logical replication the same value again
  PgTimestamp send_time = 0;
  std::string_view payload;  // a view into the decoded buffer
};

// 'k': the server's heartbeat. reply_requested asks for a standby status update at once, or the
// walsender ends the connection after wal_sender_timeout.
struct PrimaryKeepalive {
  Lsn wal_end = 0;
  PgTimestamp send_time = 0;
  bool reply_requested = false;
};

using CopyDataMessage = std::variant<XLogData, PrimaryKeepalive, DecodeError>;

// Decodes one CopyData payload a walsender sent. An empty or unknown first byte, a header that is
// cut short, a keepalive with bytes after it, or a reply flag other than 0 or 1 is a DecodeError.
CopyDataMessage decode_copy_data(std::string_view bytes);

// 'r': the client's progress report. The server may recycle WAL before `flushed` and, for a
// logical slot, moves confirmed_flush_lsn there: report only what is durably handled.
struct StandbyStatusUpdate {
  Lsn written = 0;  // the last WAL byte + 1 received
  Lsn flushed = 0;  // ... and durably handled
  Lsn applied = 0;  // ... and applied
  PgTimestamp clock = 0;
  bool reply_requested = false;  // ask the server to answer with a keepalive
};

inline constexpr std::size_t kStandbyStatusUpdateSize = 1 + 8 + 8 + 8 + 8 + 1;

// The 34 bytes to send with PQputCopyData.
std::array<char, kStandbyStatusUpdateSize> encode_standby_status_update(
    const StandbyStatusUpdate& update);
// The inverse, for tests and tools; a DecodeError for anything but exactly one 'r' message.
std::variant<StandbyStatusUpdate, DecodeError> decode_standby_status_update(std::string_view bytes);

// `time` as PostgreSQL's TimestampTz (microseconds since 2000-01-01), for StandbyStatusUpdate.
PgTimestamp to_pg_timestamp(std::chrono::system_clock::time_point time);
// `time` as timestamptz text PostgreSQL reads whatever its TimeZone ("2026-12-01
// 11:36:41.000123+00").
std::string format_pg_timestamp(PgTimestamp time);
// "16/B374D848", as pg_lsn prints it.
std::string format_lsn(Lsn lsn);

// ---- pgoutput, protocol version 1 ----

// 'B'. Sent before a transaction's first published change or transactional message (since
// PostgreSQL 15 a transaction that publishes nothing sends neither Begin nor Commit).
struct Begin {
  Lsn final_lsn = 0;  // the commit record's position
  PgTimestamp commit_time = 0;
  std::uint32_t xid = 0;
};

// 'C'.
struct Commit {
  std::uint8_t flags = 0;  // unused by PostgreSQL 15; anything but 0 is refused, as PostgreSQL does
  Lsn commit_lsn = 0;
  Lsn end_lsn = 0;  // the end of the commit record: where a restart resumes
  PgTimestamp commit_time = 0;
};

struct RelationColumn {
  std::uint8_t flags = 0;  // bit 0: part of the replica identity (the key)
  std::string name;
  std::uint32_t type_oid = 0;
  std::int32_t type_modifier = -1;  // atttypmod, -1 when the type has none
  [[nodiscard]] bool is_key() const noexcept { return (flags & 1U) != 0; }
};

// 'R': a table's shape, sent before its first change in a session and after every change of it.
// Later Insert messages carry one TupleColumn per column here, in this order (dropped and
// generated columns are left out of both).
struct Relation {
  std::uint32_t relation_id = 0;  // the table's OID
  std::string namespace_name;     // empty for pg_catalog
  std::string name;
  char replica_identity = 'd';  // 'd' default, 'n' nothing, 'f' full, 'i' index
  std::vector<RelationColumn> columns;
};

enum class ColumnKind : char {
  null = 'n',
  unchanged_toast = 'u',  // a TOASTed value the change did not touch; its value is not sent
  text = 't',             // the type's text output
  binary = 'b',           // the type's send function's output (the slot's 'binary' option)
};

struct TupleColumn {
  ColumnKind kind = ColumnKind::null;
  std::string_view value;  // text or binary only; a view into the decoded buffer
};

// 'I'.
struct Insert {
  std::uint32_t relation_id = 0;
  std::vector<TupleColumn> columns;
};

// 'U'. The new row always; before it the old key ('K', when the update changed the replica
// identity's columns) or the whole old row ('O', under REPLICA IDENTITY FULL). The relay reads
// updates of one table only: a table-less relay, the producers' sequence counters (the proof that
// a table-less message is a producer's, relay/cdc/sequence_witness.hpp).
struct Update {
  std::uint32_t relation_id = 0;
  char old_kind = 0;  // 'K', 'O', or 0 when no old tuple was sent
  std::vector<TupleColumn> old_columns;
  std::vector<TupleColumn> columns;  // the new row
};

// 'M': pg_logical_emit_message(transactional, prefix, content). A non-transactional one comes
// outside any Begin/Commit, and only once its WAL is flushed: PostgreSQL 15 does not flush for it
// (the WAL writer does within wal_writer_delay, or the next commit).
struct LogicalMessage {
  std::uint8_t flags = 0;  // bit 0: transactional (between Begin and Commit)
  // The END of the message's WAL record, as pg_logical_emit_message returns it, not its start:
  // for a transactional message often equal to the Commit's commit_lsn.
  Lsn lsn = 0;
  std::string_view prefix;   // views into the decoded buffer
  std::string_view content;  // any bytes, NUL included
  [[nodiscard]] bool transactional() const noexcept { return (flags & 1U) != 0; }
};

// A message the relay does not act on, checked to be well-formed and then skipped: 'D' delete, 'T'
// truncate, 'Y' type, 'O' origin.
struct Ignored {
  char kind = 0;
};

using PgOutputMessage =
    std::variant<Begin, Commit, Relation, Insert, Update, LogicalMessage, Ignored, DecodeError>;

// Decodes one pgoutput message. Stream and two-phase messages (protocol versions 2 and 3) and any
// other first byte are a DecodeError naming the byte.
PgOutputMessage decode_pgoutput(std::string_view bytes);

// ---- Mapping a relation's columns ----

struct MissingColumn {
  std::string column;   // the first wanted column the relation lacks
  std::string message;  // safe to print
};

// The position in `relation.columns` (and so in each Insert's columns) of every name in `wanted`,
// in the order of `wanted`; names compare exactly (PostgreSQL folds unquoted names to lower case
// before they reach the catalog). A MissingColumn names the first one the relation lacks.
std::variant<std::vector<std::size_t>, MissingColumn> find_columns(
    const Relation& relation, const std::vector<std::string>& wanted);

}  // namespace outbox::cdc
