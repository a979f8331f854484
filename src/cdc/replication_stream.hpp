#pragma once
// The I/O half of the change-data-capture relay: PostgreSQL's streaming replication protocol over
// libpq, for one logical slot with the built-in `pgoutput` plugin (protocol version 1, messages
// on). It opens a replication connection (replication=database), manages slots, streams, and
// reports progress; pgoutput.hpp decodes what comes. No relay logic: no events, no outbox tables.
//
//   ReplicationStream stream(url);                       // connects, IDENTIFY_SYSTEM
//   if (!stream.find_slot("orders")) stream.create_slot("orders", false);
//   stream.start("orders", "orders_pub", confirmed);     // COPY BOTH from here on
//   while (...) {
//     if (auto message = stream.read(100ms)) { ... decode_pgoutput(message->xlog_data()->payload) }
//     if (stream.status_due()) stream.send_status(received, durable, durable);
//   }
//
// Errors: every failure is a ReplicationError (a DatabaseError) whose failure() says what went
// wrong and whose retryable() says whether the same call may succeed later; see
// ReplicationFailure. Invalid names are InvalidArgument, thrown before anything is sent.
//
// Thread safety: one thread uses a stream (as for a libpq connection). The free functions and
// StatusSchedule's const members are pure.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "cdc/pgoutput.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"

namespace outbox::cdc {

// What made a replication call fail. Where PostgreSQL 15 sends one SQLSTATE for two of these (a
// missing slot and a missing publication are both 42704), the server's message tells them apart.
enum class ReplicationFailure {
  other,                // anything else: sqlstate() and retryable() as src/pg classifies them
  unavailable,          // no server, the connection broke, or the server ended the stream:
                        // retryable (reconnect and start again from the confirmed position)
  not_permitted,        // 42501: the role has neither REPLICATION nor superuser
  slot_missing,         // 42704 on the slot: create it (or fix the name)
  slot_exists,          // 42710: create_slot of a name already taken
  slot_in_use,          // 55006: another session streams from it; retryable (it may let go)
  slot_invalidated,     // 55000 "cannot read from logical replication slot ... invalidated", or
                        // 58P01 "requested WAL segment ... has already been removed": the WAL it
                        // needed is gone; drop, create again and resynchronise
  publication_missing,  // 42704 on the publication (sent while streaming, see start())
  protocol,             // the server sent bytes pgoutput.hpp cannot decode; not retryable
};

// "slot_in_use", ...: for logs and tests.
std::string_view to_string(ReplicationFailure failure) noexcept;

// Which failure a server error is, from its SQLSTATE, primary message and detail (PostgreSQL's
// English messages; an unrecognised text is `other`). A connection failure without a SQLSTATE is
// the caller's to tell.
ReplicationFailure classify_replication_error(std::string_view sqlstate, std::string_view primary,
                                              std::string_view detail);

class ReplicationError : public DatabaseError {
 public:
  ReplicationError(ReplicationFailure failure, const std::string& message, std::string sqlstate,
                   bool retryable)
      : DatabaseError(message, std::move(sqlstate), retryable), failure_(failure) {}
  [[nodiscard]] ReplicationFailure failure() const noexcept { return failure_; }

 private:
  ReplicationFailure failure_;
};

// ---- Names ----

// PostgreSQL's rule for slot names: 1 to 63 characters of a-z, 0-9 and '_'. Throws
// InvalidArgument saying which character or why.
void validate_slot_name(std::string_view name);
// A publication name as CREATE PUBLICATION takes it: 1 to 63 bytes, no control or other character
// a terminal would act on (common/printable.hpp), since it is quoted in commands and errors.
void validate_publication_name(std::string_view name);
// The value of pgoutput's publication_names option for one publication, as a string literal of
// the replication command language: pgoutput splits the value as a list of identifiers, so the
// name is double-quoted (keeping its case; '"' doubled) and the whole single-quoted ('\'' doubled).
// `Orders"x` → '"Orders""x"'. The name must be valid.
std::string publication_names_literal(std::string_view publication);
// Several publications: each name quoted so, joined by ',' ({"a", "B"} → '"a","B"').
std::string publication_names_literal(const std::vector<std::string>& publications);
// A string literal of the replication command language: single-quoted, '\'' doubled.
std::string quoted_literal(std::string_view text);

// "16/B374D848" (as pg_lsn prints it) → the LSN; nullopt for anything else.
std::optional<Lsn> parse_lsn(std::string_view text);

// ---- When to send a standby status update ----

// Every `interval` after the last one sent (or after streaming started), and at once when the
// server asked for a reply: a walsender whose keepalive asked (it does after half of
// wal_sender_timeout without a reply) ends the connection after wal_sender_timeout.
class StatusSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // `interval` must be positive (InvalidArgument).
  explicit StatusSchedule(std::chrono::milliseconds interval, Clock::time_point now = {});

  // Streaming started, or a status update went out: the next is due `interval` after `now`.
  void sent(Clock::time_point now) noexcept;
  // A keepalive asked for a reply: due at once until the next sent().
  void reply_requested() noexcept { reply_requested_ = true; }

  [[nodiscard]] bool due(Clock::time_point now) const noexcept {
    return until_due(now).count() == 0;
  }
  // 0 when due, else how long until it is (rounded up to whole milliseconds): a bound for the
  // caller's next read().
  [[nodiscard]] std::chrono::milliseconds until_due(Clock::time_point now) const noexcept;
  [[nodiscard]] std::chrono::milliseconds interval() const noexcept { return interval_; }

 private:
  std::chrono::milliseconds interval_;
  Clock::time_point last_sent_;
  bool reply_requested_ = false;
};

// ---- What the stream says ----

// IDENTIFY_SYSTEM's answer.
struct SystemIdentity {
  std::string system_id;  // the cluster's identifier, decimal (as the server sends it)
  std::uint32_t timeline = 0;
  Lsn xlog_pos = 0;  // the current WAL flush position
  std::string dbname;
};

// pg_replication_slots.wal_status.
enum class WalStatus { unknown, reserved, extended, unreserved, lost };

// One row of pg_replication_slots.
struct SlotInfo {
  std::string slot_type;  // "logical" or "physical"
  std::string plugin;     // "pgoutput"; empty for a physical slot
  std::string database;   // empty for a physical slot
  bool temporary = false;
  bool active = false;
  std::optional<int> active_pid;   // the session streaming from it, while active
  std::optional<Lsn> restart_lsn;  // none once the slot is invalidated
  std::optional<Lsn> confirmed_flush_lsn;
  WalStatus wal_status = WalStatus::unknown;
  // Bytes of WAL that can still be written before the slot is in danger of losing what it needs;
  // none when max_slot_wal_keep_size is -1 (unlimited) or the slot is lost. May be negative.
  std::optional<std::int64_t> safe_wal_size;
};

// CREATE_REPLICATION_SLOT's answer.
struct CreatedSlot {
  std::string name;
  Lsn consistent_point = 0;  // start streaming here: the first change after the snapshot
  // With export_snapshot: the snapshot's name for SET TRANSACTION SNAPSHOT (else empty).
  std::string snapshot_name;
};

// One CopyData message from the walsender, decoded, owning the buffer libpq allocated for it
// (freed with PQfreemem when the message is destroyed). XLogData::payload points into that
// buffer: it stays valid as long as the message, also after the message is moved (the buffer is
// on the heap and does not move with it). Move-only.
class StreamMessage {
 public:
  using Body = std::variant<XLogData, PrimaryKeepalive>;

  [[nodiscard]] const Body& body() const noexcept { return body_; }
  [[nodiscard]] const XLogData* xlog_data() const noexcept { return std::get_if<XLogData>(&body_); }
  [[nodiscard]] const PrimaryKeepalive* keepalive() const noexcept {
    return std::get_if<PrimaryKeepalive>(&body_);
  }
  // The whole CopyData payload as received.
  [[nodiscard]] std::string_view bytes() const noexcept { return {buffer_.get(), size_}; }

 private:
  friend class ReplicationStream;
  using Buffer = detail::Holder<char, &PQfreemem>;
  StreamMessage(Buffer buffer, std::size_t size, Body body)
      : buffer_(std::move(buffer)), size_(size), body_(body) {}

  Buffer buffer_;
  std::size_t size_;
  Body body_;
};

struct ReplicationStreamOptions {
  // Sent as fallback_application_name: an application_name in the connection string wins. Shows
  // in pg_stat_replication and pg_stat_activity.
  std::string application_name = "outbox-cdc";
  // How often status_due() asks for a standby status update without a keepalive asking; keep it
  // well under the server's wal_sender_timeout (60 s by default).
  std::chrono::milliseconds status_interval{10'000};
  // This session's wal_sender_timeout (0: the server's, 60 s by default): the server ends a
  // stream it has heard nothing from for this long, which frees the slot of a stalled client for
  // another. Set with the connection's `options` (replacing any the connection string has); must
  // exceed status_interval.
  std::chrono::milliseconds wal_sender_timeout{0};
};

// A replication connection for one logical slot. Two modes: commands (after construction; the
// slot functions) and streaming (after start(); read, send_status). stop() goes back.
class ReplicationStream {
 public:
  // Connects to `database_url` (a libpq connection string or URI; its password is never printed)
  // with replication=database added, whatever the string says about replication, and runs
  // IDENTIFY_SYSTEM. Throws ReplicationError: unavailable (retryable) when the server cannot be
  // reached; not_permitted for a role without REPLICATION; other, not retryable, for a refusal no
  // retry fixes (password 28P01, pg_hba 28000, no such database 3D000, bad settings 08001).
  explicit ReplicationStream(const std::string& database_url,
                             ReplicationStreamOptions options = {});
  // Ends a running stream (CopyDone, without waiting for the server's answer) and closes.
  ~ReplicationStream();
  ReplicationStream(const ReplicationStream&) = delete;
  ReplicationStream& operator=(const ReplicationStream&) = delete;

  [[nodiscard]] const SystemIdentity& identity() const noexcept { return identity_; }
  // The walsender's process id (pg_replication_slots.active_pid while streaming).
  [[nodiscard]] int backend_pid() const noexcept;
  [[nodiscard]] bool streaming() const noexcept { return mode_ == Mode::streaming; }

  // ---- Commands (not while streaming: InvalidArgument) ----

  // The slot's row of pg_replication_slots (any database's), or nullopt when there is none.
  std::optional<SlotInfo> find_slot(std::string_view name);
  // CREATE_REPLICATION_SLOT "name" LOGICAL pgoutput (SNAPSHOT 'export' | 'nothing'). Waits for
  // the transactions running at the time to end (a long one delays it). With export_snapshot the
  // snapshot (what the database looked like at consistent_point) can be imported by other
  // sessions (BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '<name>') only until
  // the next command this stream sends (find_slot, create_slot, drop_slot, start) or its end; a
  // transaction that imported it keeps it. Throws slot_exists, or other (e.g. 53400, all slots in
  // use).
  CreatedSlot create_slot(std::string_view name, bool export_snapshot);
  // DROP_REPLICATION_SLOT "name": throws slot_missing, or slot_in_use while a session streams
  // from it.
  void drop_slot(std::string_view name);

  // START_REPLICATION SLOT "slot" LOGICAL from (proto_version '1', publication_names '"pub"',
  // messages 'true'): streaming from here on. PostgreSQL starts at the slot's confirmed_flush_lsn
  // when `from` is before it (0 means just that), and sends only transactions that commit after
  // the start. Throws slot_missing, slot_in_use, slot_invalidated, not_permitted. PostgreSQL 15
  // looks the publication up only when it decodes the first change, so a missing publication
  // makes the first read() after a change throw publication_missing, not start().
  void start(std::string_view slot, std::string_view publication, Lsn from);
  // The same, streaming the changes of every publication in `publications` (one or more).
  void start(std::string_view slot, const std::vector<std::string>& publications, Lsn from);

  // ---- Streaming (else InvalidArgument) ----

  // The next message, waiting up to `timeout` for one (0: only what has arrived); nullopt when
  // none came in time. A keepalive asking for a reply makes status_due() true. Throws
  // ReplicationError: protocol when the bytes do not decode (then the stream is unusable; make a
  // new one); unavailable (retryable) when the connection broke or the server ended the stream,
  // with the server's message when it sent one; slot_invalidated, publication_missing, ... when
  // the server ended the stream with that error.
  std::optional<StreamMessage> read(std::chrono::milliseconds timeout);
  // The connection's socket, for a caller that waits on it beside others (then read(0)); -1 when
  // there is none.
  [[nodiscard]] int socket() const noexcept;

  // A standby status update (PQputCopyData + PQflush, blocking until sent). `flushed` moves the
  // slot's confirmed_flush_lsn (never backwards): report only what is durably handled, the end_lsn
  // of a Commit whose changes are safe. 0 reports nothing for that position. Throws unavailable.
  void send_status(Lsn written, Lsn flushed, Lsn applied, bool reply_requested = false);
  // Whether a status update is due (every status_interval, at once after a keepalive asked).
  [[nodiscard]] bool status_due() const noexcept;
  // How long until it is (0 when due): a bound for read()'s timeout.
  [[nodiscard]] std::chrono::milliseconds until_status_due() const noexcept;
  // The highest WAL position the server said it sent (XLogData and keepalive wal_end); 0 before
  // any. A `written` value for send_status.
  [[nodiscard]] Lsn received_lsn() const noexcept { return received_lsn_; }

  // Ends streaming (CopyDone) and waits up to `timeout` for the server to end it too; what it
  // sent meanwhile is dropped. The slot is released when this returns: the commands and start()
  // work again. Throws ReplicationError (unavailable when the connection broke or the server took
  // longer; the stream is then unusable).
  void stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  enum class Mode { commands, streaming, broken };

  void require(Mode mode, std::string_view call) const;
  pg::Result command(const std::string& text, std::string_view what);
  std::optional<StreamMessage> take_message();
  [[noreturn]] void copy_ended();
  std::optional<ReplicationError> finish_copy();
  bool wait_readable(std::chrono::milliseconds timeout);

  pg::Connection connection_;
  ReplicationStreamOptions options_;
  SystemIdentity identity_;
  Mode mode_ = Mode::commands;
  StatusSchedule schedule_;
  Lsn received_lsn_ = 0;
};

}  // namespace outbox::cdc
