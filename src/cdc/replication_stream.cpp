// The replication client's I/O (replication_stream.hpp): the replication connection, its commands,
// the stream and the failures it reports. What does no I/O is replication_terms.cpp.

#include "cdc/replication_stream.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace outbox::cdc {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// What a caller should do about it, added to the server's message.
std::string_view hint(ReplicationFailure failure) {
  switch (failure) {
    case ReplicationFailure::not_permitted:
      return "the role needs the REPLICATION attribute (ALTER ROLE ... REPLICATION) or superuser";
    case ReplicationFailure::slot_missing:
      return "create the slot, or check its name";
    case ReplicationFailure::slot_exists:
      return "a replication slot of that name exists already";
    case ReplicationFailure::slot_in_use:
      return "another session is streaming from this slot; a slot serves one consumer at a time";
    case ReplicationFailure::slot_invalidated:
      return "the slot lost WAL it needs (max_slot_wal_keep_size): drop it, create it again and "
             "resynchronise; changes in between were not captured";
    case ReplicationFailure::publication_missing:
      return "create it (CREATE PUBLICATION ... FOR TABLE ...), or check its name";
    default:
      return "";
  }
}

bool retryable(ReplicationFailure failure, const DatabaseError& base) {
  switch (failure) {
    case ReplicationFailure::unavailable:
    case ReplicationFailure::slot_in_use:
      return true;
    case ReplicationFailure::other:
      return base.retryable();
    default:
      return false;
  }
}

std::string field(const PGresult* result, int code) {
  const char* value = result != nullptr ? PQresultErrorField(result, code) : nullptr;
  return value != nullptr ? value : "";
}

// The error of a failed command or stream on `conn` (`result` may be null).
ReplicationError make_error(PGconn* conn, const PGresult* result, std::string_view what) {
  const DatabaseError base = pg::make_error(conn, result, what);
  ReplicationFailure failure =
      classify_replication_error(base.sqlstate(), field(result, PG_DIAG_MESSAGE_PRIMARY),
                                 field(result, PG_DIAG_MESSAGE_DETAIL));
  const std::string_view advice = hint(failure);
  std::string message = base.what();
  if (!advice.empty()) message += ": " + std::string(advice);
  return {failure, message, base.sqlstate(), retryable(failure, base)};
}

std::string quoted_identifier(std::string_view name) {  // names are valid: no '"' in them
  return "\"" + std::string(name) + "\"";
}

std::optional<std::int64_t> optional_int(const pg::Result& result, int row, int column) {
  if (result.is_null(row, column)) return std::nullopt;
  return result.int64(row, column);
}

std::optional<Lsn> optional_lsn(const pg::Result& result, int row, int column) {
  if (result.is_null(row, column)) return std::nullopt;
  return parse_lsn(result.text(row, column));
}

WalStatus wal_status(std::string_view text) {
  if (text == "reserved") return WalStatus::reserved;
  if (text == "extended") return WalStatus::extended;
  if (text == "unreserved") return WalStatus::unreserved;
  if (text == "lost") return WalStatus::lost;
  return WalStatus::unknown;
}

}  // namespace

// ---- ReplicationStream ----

namespace {

pg::Connection open_replication(const std::string& database_url,
                                const ReplicationStreamOptions& options) {
  if (options.status_interval.count() <= 0) {
    throw InvalidArgument(
        fmt::format("ReplicationStreamOptions::status_interval must be positive, "
                    "not {} ms",
                    options.status_interval.count()));
  }
  std::vector<pg::Connection::Setting> settings{{"replication", "database"}};
  if (options.wal_sender_timeout.count() > 0) {
    if (options.wal_sender_timeout <= options.status_interval) {
      throw InvalidArgument(fmt::format(
          "ReplicationStreamOptions::wal_sender_timeout ({} ms) must be longer than the "
          "status_interval ({} ms), or the server ends every idle stream",
          options.wal_sender_timeout.count(), options.status_interval.count()));
    }
    settings.push_back(
        {"options", fmt::format("-c wal_sender_timeout={}ms", options.wal_sender_timeout.count())});
  }
  try {
    return pg::Connection::open(database_url, options.application_name, settings);
  } catch (const DatabaseError& error) {
    // pg classifies connection refusals (no SQLSTATE reaches a client that failed to connect).
    const ReplicationFailure failure = error.sqlstate() == "42501"
                                           ? ReplicationFailure::not_permitted
                                       : error.retryable() ? ReplicationFailure::unavailable
                                                           : ReplicationFailure::other;
    throw ReplicationError(failure, error.what(), error.sqlstate(), error.retryable());
  }
}

}  // namespace

ReplicationStream::ReplicationStream(const std::string& database_url,
                                     ReplicationStreamOptions options)
    : connection_(open_replication(database_url, options)),
      options_(std::move(options)),
      schedule_(options_.status_interval, Clock::now()) {
  const pg::Result result = command("IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM");
  if (result.rows() != 1 || PQnfields(result.get()) < 4) {
    throw ReplicationError(ReplicationFailure::protocol,
                           "IDENTIFY_SYSTEM answered with an unexpected shape", "08P01", false);
  }
  identity_.system_id = std::string(result.text(0, 0));
  identity_.timeline = static_cast<std::uint32_t>(result.int64(0, 1));
  identity_.xlog_pos = parse_lsn(result.text(0, 2)).value_or(0);
  identity_.dbname = std::string(result.text(0, 3));
  if (result.is_null(0, 3)) {
    // Only a physical replication connection answers without a database.
    throw ReplicationError(ReplicationFailure::other,
                           "the replication connection is not connected to a database", "08P01",
                           false);
  }
}

ReplicationStream::~ReplicationStream() {
  PGconn* conn = connection_.get();
  if (mode_ == Mode::streaming && conn != nullptr && PQstatus(conn) == CONNECTION_OK) {
    // The walsender ends its side and then reads our Terminate (PQfinish): a clean exit.
    if (PQputCopyEnd(conn, nullptr) == 1) PQflush(conn);
  }
}

int ReplicationStream::backend_pid() const noexcept { return PQbackendPID(connection_.get()); }

void ReplicationStream::require(Mode mode, std::string_view call) const {
  if (mode_ == mode) return;
  if (mode_ == Mode::broken) {
    throw ReplicationError(ReplicationFailure::unavailable,
                           fmt::format("replication stream: {} on a stream that failed earlier; "
                                       "open a new one",
                                       call),
                           "08006", true);
  }
  throw InvalidArgument(fmt::format("replication stream: {} {}", call,
                                    mode == Mode::streaming ? "needs a started stream (start())"
                                                            : "is not possible while streaming "
                                                              "(stop() first)"));
}

pg::Result ReplicationStream::command(const std::string& text, std::string_view what) {
  PGconn* conn = connection_.get();
  pg::Result result(PQexec(conn, text.c_str()));
  const ExecStatusType status =
      result.get() != nullptr ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    if (PQstatus(conn) != CONNECTION_OK) mode_ = Mode::broken;
    throw make_error(conn, result.get(), what);
  }
  return result;
}

std::optional<SlotInfo> ReplicationStream::find_slot(std::string_view name) {
  require(Mode::commands, "find_slot");
  validate_slot_name(name);
  // A replication connection runs SQL over the simple query protocol only (no parameters); the
  // name is valid, so it stands as a literal.
  const pg::Result result = command(
      "SELECT slot_type, coalesce(plugin, ''), coalesce(database::text, ''), temporary, active, "
      "active_pid, restart_lsn::text, confirmed_flush_lsn::text, wal_status, safe_wal_size "
      "FROM pg_replication_slots WHERE slot_name = " +
          quoted_literal(name),
      "looking up replication slot " + std::string(name));
  if (result.rows() == 0) return std::nullopt;
  SlotInfo slot;
  slot.slot_type = std::string(result.text(0, 0));
  slot.plugin = std::string(result.text(0, 1));
  slot.database = std::string(result.text(0, 2));
  slot.temporary = result.text(0, 3) == "t";
  slot.active = result.text(0, 4) == "t";
  if (const auto pid = optional_int(result, 0, 5)) slot.active_pid = static_cast<int>(*pid);
  slot.restart_lsn = optional_lsn(result, 0, 6);
  slot.confirmed_flush_lsn = optional_lsn(result, 0, 7);
  slot.wal_status = wal_status(result.text(0, 8));
  slot.safe_wal_size = optional_int(result, 0, 9);
  return slot;
}

CreatedSlot ReplicationStream::create_slot(std::string_view name, bool export_snapshot) {
  require(Mode::commands, "create_slot");
  validate_slot_name(name);
  const pg::Result result = command("CREATE_REPLICATION_SLOT " + quoted_identifier(name) +
                                        " LOGICAL pgoutput (SNAPSHOT " +
                                        (export_snapshot ? "'export'" : "'nothing'") + ")",
                                    "creating replication slot " + std::string(name));
  const std::optional<Lsn> point = result.rows() == 1 && PQnfields(result.get()) >= 3
                                       ? parse_lsn(result.text(0, 1))
                                       : std::nullopt;
  if (!point) {
    throw ReplicationError(ReplicationFailure::protocol,
                           "CREATE_REPLICATION_SLOT answered with an unexpected shape", "08P01",
                           false);
  }
  CreatedSlot created;
  created.name = std::string(result.text(0, 0));
  created.consistent_point = *point;
  if (!result.is_null(0, 2)) created.snapshot_name = std::string(result.text(0, 2));
  return created;
}

void ReplicationStream::drop_slot(std::string_view name) {
  require(Mode::commands, "drop_slot");
  validate_slot_name(name);
  command("DROP_REPLICATION_SLOT " + quoted_identifier(name),
          "dropping replication slot " + std::string(name));
}

void ReplicationStream::start(std::string_view slot, std::string_view publication, Lsn from) {
  start(slot, std::vector<std::string>{std::string(publication)}, from);
}

void ReplicationStream::start(std::string_view slot, const std::vector<std::string>& publications,
                              Lsn from) {
  require(Mode::commands, "start");
  validate_slot_name(slot);
  if (publications.empty()) throw InvalidArgument("starting replication: no publication named");
  for (const std::string& publication : publications) validate_publication_name(publication);
  const std::string text = "START_REPLICATION SLOT " + quoted_identifier(slot) + " LOGICAL " +
                           format_lsn(from) + " (proto_version '1', publication_names " +
                           publication_names_literal(publications) + ", messages 'true')";
  PGconn* conn = connection_.get();
  const pg::Result result(PQexec(conn, text.c_str()));
  if (result.get() == nullptr || PQresultStatus(result.get()) != PGRES_COPY_BOTH) {
    if (PQstatus(conn) != CONNECTION_OK) mode_ = Mode::broken;
    throw make_error(
        conn, result.get(),
        fmt::format("starting replication from slot {} at {}", slot, format_lsn(from)));
  }
  mode_ = Mode::streaming;
  received_lsn_ = 0;
  schedule_.sent(Clock::now());
}

std::optional<StreamMessage> ReplicationStream::read(milliseconds timeout) {
  require(Mode::streaming, "read");
  const auto deadline = Clock::now() + std::max(timeout, milliseconds(0));
  for (;;) {
    if (std::optional<StreamMessage> message = take_message()) return message;
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (!wait_readable(std::max(left, milliseconds(0)))) return std::nullopt;
    if (PQconsumeInput(connection_.get()) == 0) {
      mode_ = Mode::broken;
      throw make_error(connection_.get(), nullptr, "reading the replication stream");
    }
  }
}

std::optional<StreamMessage> ReplicationStream::take_message() {
  PGconn* conn = connection_.get();
  char* raw = nullptr;
  const int length = PQgetCopyData(conn, &raw, /*async=*/1);
  StreamMessage::Buffer buffer(raw);  // owned from here, whatever happens next
  if (length == 0) return std::nullopt;
  if (length == -1) copy_ended();
  if (length < 0) {
    mode_ = Mode::broken;
    throw make_error(conn, nullptr, "reading the replication stream");
  }
  const auto size = static_cast<std::size_t>(length);
  const CopyDataMessage decoded = decode_copy_data(std::string_view(raw, size));
  if (const auto* error = std::get_if<DecodeError>(&decoded)) {
    mode_ = Mode::broken;
    throw ReplicationError(
        ReplicationFailure::protocol,
        "replication stream: the server sent what outbox cannot decode: " + error->message, "08P01",
        false);
  }
  if (const auto* keepalive = std::get_if<PrimaryKeepalive>(&decoded)) {
    received_lsn_ = std::max(received_lsn_, keepalive->wal_end);
    if (keepalive->reply_requested) schedule_.reply_requested();
    return StreamMessage(std::move(buffer), size, *keepalive);
  }
  const auto& data = std::get<XLogData>(decoded);
  received_lsn_ = std::max(received_lsn_, data.wal_end);
  return StreamMessage(std::move(buffer), size, data);
}

// After PQgetCopyData said the copy ended: the server's error, or its end of the stream.
void ReplicationStream::copy_ended() {
  std::optional<ReplicationError> error = finish_copy();
  if (error) throw *error;
  throw ReplicationError(ReplicationFailure::unavailable,
                         "the server ended the replication stream (is it shutting down?)", "08006",
                         true);
}

// Reads the results that follow the end of a copy (answering a CopyDone of the server's with our
// own); returns the first error among them. The stream is back in command mode when the
// connection survived.
std::optional<ReplicationError> ReplicationStream::finish_copy() {
  PGconn* conn = connection_.get();
  std::optional<ReplicationError> error;
  for (int results = 0; results < 16; ++results) {
    const pg::Result result(PQgetResult(conn));
    if (result.get() == nullptr) break;
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_COPY_IN) {
      PQputCopyEnd(conn, nullptr);  // the server ended its side first
    } else if (status == PGRES_FATAL_ERROR && !error) {
      error = make_error(conn, result.get(), "replication stream");
    }
  }
  mode_ = PQstatus(conn) == CONNECTION_OK && PQisBusy(conn) == 0 ? Mode::commands : Mode::broken;
  return error;
}

int ReplicationStream::socket() const noexcept {
  return PQsocket(connection_.get());  // -1 for no connection
}

// Waits until the socket is readable (or failed, or a signal came) or `timeout` passed; false
// when it passed.
bool ReplicationStream::wait_readable(milliseconds timeout) {
  const int socket = PQsocket(connection_.get());
  if (socket < 0) {
    mode_ = Mode::broken;
    throw make_error(connection_.get(), nullptr, "reading the replication stream");
  }
  pollfd fd{socket, POLLIN, 0};
  const int ready =
      ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(timeout.count(), INT_MAX)));
  return ready != 0;  // > 0 readable or failed (PQconsumeInput tells), < 0 EINTR: look again
}

void ReplicationStream::send_status(Lsn written, Lsn flushed, Lsn applied, bool reply_requested) {
  require(Mode::streaming, "send_status");
  StandbyStatusUpdate update;
  update.written = written;
  update.flushed = flushed;
  update.applied = applied;
  update.clock = to_pg_timestamp(std::chrono::system_clock::now());
  update.reply_requested = reply_requested;
  const auto bytes = encode_standby_status_update(update);
  PGconn* conn = connection_.get();
  if (PQputCopyData(conn, bytes.data(), static_cast<int>(bytes.size())) != 1 ||
      PQflush(conn) != 0) {
    mode_ = Mode::broken;
    throw make_error(conn, nullptr, "sending a standby status update");
  }
  schedule_.sent(Clock::now());
}

bool ReplicationStream::status_due() const noexcept {
  return mode_ == Mode::streaming && schedule_.due(Clock::now());
}

milliseconds ReplicationStream::until_status_due() const noexcept {
  return schedule_.until_due(Clock::now());
}

void ReplicationStream::stop(milliseconds timeout) {
  require(Mode::streaming, "stop");
  PGconn* conn = connection_.get();
  if (PQputCopyEnd(conn, nullptr) != 1 || PQflush(conn) != 0) {
    mode_ = Mode::broken;
    throw make_error(conn, nullptr, "ending the replication stream");
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    char* raw = nullptr;
    const int length = PQgetCopyData(conn, &raw, /*async=*/1);
    const StreamMessage::Buffer dropped(raw);
    if (length == -1) break;  // the server's CopyDone (or error)
    if (length < -1) {
      mode_ = Mode::broken;
      throw make_error(conn, nullptr, "ending the replication stream");
    }
    if (length > 0) continue;
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      mode_ = Mode::broken;
      throw ReplicationError(ReplicationFailure::unavailable,
                             fmt::format("the server did not end the replication stream within "
                                         "{} ms",
                                         timeout.count()),
                             "08006", true);
    }
    if (wait_readable(left) && PQconsumeInput(conn) == 0) {
      mode_ = Mode::broken;
      throw make_error(conn, nullptr, "ending the replication stream");
    }
  }
  if (std::optional<ReplicationError> error = finish_copy()) throw *error;
}

}  // namespace outbox::cdc
