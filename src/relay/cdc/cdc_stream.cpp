// CdcSource's stream: starting it (the slot prepared, from the resume position), reading and
// dispatching what it brings into the session, the horizon it gives the table path, and the
// position it reports.
#include <fmt/format.h>

#include <algorithm>
#include <new>
#include <thread>

#include "cdc/slot_admin.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "relay/cdc/cdc_source.hpp"

namespace outbox::detail {

namespace {

// Reading stops here until the loop has taken what was read: the stream's own memory bound.
constexpr std::size_t kMostMessagesPerRead = 20000;

}  // namespace

void CdcSource::reset_session() { session_ = StreamSession(options_.cdc.table_poll); }

// A new replication connection, the slot (created when missing, again when invalidated: the
// table path then publishes what the lost slot held), streaming from its confirmed position.
// Another relay may drop or create the same slot meanwhile (two relays that both found it lost):
// such a race is looked at again, a few times, before it counts as an error.
void CdcSource::start_stream() {
  write_marks();    // what the new stream brings again is then found finished, not sent twice
  reset_session();  // the old stream goes first: the new one streams the same slot
  cdc::ReplicationStreamOptions stream_options;
  stream_options.application_name = std::string(kRelayApplicationName);
  stream_options.wal_sender_timeout = options_.cdc.takeover;
  stream_options.status_interval = options_.cdc.takeover / 3;
  session_.stream = std::make_unique<cdc::ReplicationStream>(options_.database_url, stream_options);
  for (int attempt = 1;; ++attempt) {
    try {
      if (publications_.take_drop_slot_first()) drop_outlived_slot();
      prepare_slot();
      session_.stream->start(publications_.slot(), publications_.streamed(), start_position());
      note_table_rows();
      if (!polling()) show_mode();  // a new walsender (from standby or released: once switched)
      return;
    } catch (const cdc::ReplicationError& error) {
      const cdc::ReplicationFailure failure = error.failure();
      const bool raced = failure == cdc::ReplicationFailure::slot_invalidated ||
                         failure == cdc::ReplicationFailure::slot_missing ||
                         failure == cdc::ReplicationFailure::slot_exists;
      if (!raced) throw;
      if (attempt == 3) {
        // Other relays keep dropping and creating it: an outage of the slot, tried again later.
        throw DatabaseError(fmt::format("slot {}: raced with other relays three times ({})",
                                        publications_.slot(), error.what()),
                            error.sqlstate(), true);
      }
    }
  }
}

// Whether the table held any row once this stream holds the slot (the slot's earlier readers
// gone: any row they wrote is there). Unknown (rows assumed) if it cannot be asked.
void CdcSource::note_table_rows() {
  if (!options_.cdc.table_less) return;
  try {
    session_.table_rows = cdc_sql::table_has_rows(table_.connection(), options_.schema);
  } catch (const DatabaseError& error) {
    log().debug("relay {}: whether the outbox table holds rows could not be read: {}",
                options_.relay_id, error.what());
  }
}

// start_stream(), or false when another relay streams from the slot (it may let go).
bool CdcSource::try_start_stream() {
  try {
    start_stream();
    return true;
  } catch (const cdc::ReplicationError& error) {
    if (error.failure() != cdc::ReplicationFailure::slot_in_use) throw;
    reset_session();
    return false;
  }
}

// Where to start streaming when that is past the slot's saved position (resume_position.hpp).
// 0: the slot's.
cdc::Lsn CdcSource::start_position() {
  const cdc::SystemIdentity& server = session_.stream->identity();
  if (!options_.cdc.table_less) return resume_.start_from(server);
  return ResumePosition::start_from_saved(cdc_sql::saved_position(
      table_.connection(), options_.schema, publications_.slot(), server.system_id));
}

// A table-less relay saves its confirmed position with its registration, durably, at most every
// ResumePosition::kSaveEvery (start_position).
void CdcSource::save_position(cdc::Lsn confirmed) {
  if (!options_.cdc.table_less || !resume_.save_due(confirmed, Clock::now())) return;
  cdc_sql::save_position(table_.connection(), options_.schema, publications_.slot(), confirmed,
                         session_.stream->identity().system_id);
  resume_.saved(confirmed, Clock::now());
}

// The slot the stream failed on (Publications::outlived); its walsender may take a moment to exit.
// Once: a drop that fails (another relay streams the slot now) is not tried again later, when the
// slot may be a new one; the next stream that fails on the publication asks again.
void CdcSource::drop_outlived_slot() {
  for (int attempt = 1;; ++attempt) {
    try {
      session_.stream->drop_slot(publications_.slot());
      break;
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() == cdc::ReplicationFailure::slot_missing) break;
      if (error.failure() != cdc::ReplicationFailure::slot_in_use || attempt == 20) throw;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
}

void CdcSource::prepare_slot() {
  const std::string& slot = publications_.slot();
  std::optional<cdc::SlotInfo> info = session_.stream->find_slot(slot);
  if (options_.cdc.table_less && (!info || info->wal_status == cdc::WalStatus::lost) &&
      registered_before_) {
    log().error(
        "relay {}: slot {}, registered for table-less events, is {}: table-less events "
        "committed before it was lost and not yet published are LOST (they were nowhere "
        "else); producers were refused from then until now. Replay them from the broker "
        "or the producers' own records",
        options_.relay_id, slot, info ? "invalidated (its WAL was removed)" : "missing");
  }
  registered_before_ = true;  // from now on, every loss is one
  if (info && (info->slot_type != "logical" || info->plugin != "pgoutput")) {
    throw ConfigError(fmt::format(
        "relay --source cdc: slot {} is a {} slot{}{}, and the relay reads pgoutput from a "
        "logical slot: give --slot another name, or drop this one if nothing else reads it "
        "(SELECT pg_drop_replication_slot('{}'))",
        slot, printable(info->slot_type), info->plugin.empty() ? "" : " made with the plugin ",
        printable(info->plugin), slot));
  }
  if (info && info->wal_status == cdc::WalStatus::lost) {
    log().warn(
        "relay {}: slot {} was invalidated (WAL removed); creating it again, the table "
        "path publishes what it held",
        options_.relay_id, slot);
    try {
      session_.stream->drop_slot(slot);
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() != cdc::ReplicationFailure::slot_missing) throw;  // dropped already
    }
    info.reset();
  }
  if (info) return;
  try {
    const cdc::CreatedSlot created = session_.stream->create_slot(slot, false);
    log().info("relay {}: created replication slot {} at {}", options_.relay_id, slot,
               cdc::format_lsn(created.consistent_point));
  } catch (const cdc::ReplicationError& error) {
    if (error.failure() != cdc::ReplicationFailure::slot_exists) throw;  // another relay's
  }
}

bool CdcSource::read_stream(milliseconds timeout, bool* live) {
  if (live != nullptr) *live = false;
  bool got = false;
  milliseconds wait = timeout;
  for (std::size_t read = 0; read < kMostMessagesPerRead; ++read) {
    if (stream_full()) break;  // the loop has enough to do; the server keeps the rest
    std::optional<cdc::StreamMessage> message;
    try {
      message = session_.stream->read(wait);
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() != cdc::ReplicationFailure::publication_missing ||
          !publications_.outlived(table_.connection())) {
        throw;
      }
      start_stream();  // a new session: nothing of the old one is touched after this
      return true;
    }
    if (!message) {  // all there was: live traffic's, if it was little
      if (live != nullptr) *live = got && read < kLive;
      break;
    }
    got = true;
    wait = milliseconds(0);
    try {
      take(*message);
    } catch (const std::bad_alloc&) {
      // The message is half taken: no position until a new stream brings it again, after the
      // reconnect's backoff.
      session_.hold_position = true;
      throw DatabaseError("relay --source cdc: out of memory taking a replication message", "53200",
                          true);
    }
  }
  return got;
}

bool CdcSource::stream_full() const {
  return session_.book.waiting_bytes() >= options_.max_in_flight_bytes ||
         session_.book.open_events() >= 2 * options_.max_in_flight || session_.witness_due;
}

int CdcSource::stream_news_socket() const {
  if (polling() || !session_.streaming() || stream_full()) return -1;
  return session_.stream->socket();
}

// The stream's socket while read_stream() would read it, and the sockets of marks sent and not
// answered (fetch() takes their answers).
NewsSockets CdcSource::news_sockets() const {
  static_assert(1 + StreamedMarks::kLanes <= NewsSockets().size());
  NewsSockets sockets;
  sockets.fill(-1);
  if (polling() || !session_.streaming()) return sockets;
  sockets[0] = stream_news_socket();
  const auto marks = marks_.answer_sockets();
  std::copy(marks.begin(), marks.end(), sockets.begin() + 1);
  return sockets;
}

void CdcSource::take(const cdc::StreamMessage& message) {
  if (const cdc::XLogData* data = message.xlog_data()) {
    take_change(data->payload, data->send_time);
  } else if (const cdc::PrimaryKeepalive* keepalive = message.keepalive()) {
    session_.book.keepalive(keepalive->wal_end);
  }
  if (session_.probe && session_.stream->received_lsn() >= session_.probe->second) {
    session_.caught_up_time = std::max(session_.caught_up_time, session_.probe->first);
    session_.probe.reset();
  }
}

void CdcSource::take_change(std::string_view payload, cdc::PgTimestamp sent) {
  cdc::PgOutputMessage change = cdc::decode_pgoutput(payload);
  if (const auto* error = std::get_if<cdc::DecodeError>(&change)) {
    throw DatabaseError(
        "relay --source cdc: a replication message did not decode: " + error->message, "08P01",
        false);
  }
  if (const auto* message = std::get_if<cdc::LogicalMessage>(&change)) {
    take_message(*message);
  } else if (const auto* begin = std::get_if<cdc::Begin>(&change)) {
    const cdc::Lsn unproven_until = publications_.unproven_until();
    if (unproven_until != 0 && begin->final_lsn > unproven_until) {
      // Past the WAL older than the witness publication: read no further until everything
      // before is confirmed, then stream again with the witness (run_duties).
      session_.witness_due = true;
      return;
    }
    session_.witness.begin();
    session_.reading_xid = begin->xid;
    session_.reading_commit_time = begin->commit_time;
    // A negative lag (a clock stepped back, or the walsender's clock not the committer's) is not
    // taken for live: a catch-up must not be paced.
    const cdc::PgTimestamp lag = sent - begin->commit_time;
    session_.live = lag >= 0 && lag < StreamSession::kLiveLag;
    session_.book.begin(begin->xid);
  } else if (const auto* commit = std::get_if<cdc::Commit>(&change)) {
    session_.book.commit(commit->end_lsn, commit->commit_time);
  } else if (const auto* relation = std::get_if<cdc::Relation>(&change)) {
    take_relation(*relation);
  } else if (const auto* update = std::get_if<cdc::Update>(&change)) {
    session_.witness.note(update->relation_id, update->columns);
  } else if (const auto* insert = std::get_if<cdc::Insert>(&change)) {
    take_insert(*insert);
  }
}

void CdcSource::take_message(const cdc::LogicalMessage& message) {
  if (message.prefix == message_prefix_) {
    if (options_.cdc.table_less) {
      take_table_less(message);
      return;
    }
    // A table-less producer writes only while a table-less relay's slot is registered, and a
    // relay without --table-less refuses a registered slot at start. The slot may have been
    // registered since (a table-less relay started as this one's standby, during a switch to
    // table-less): then this relay stops as it would at start, holding the position, and the
    // table-less relay takes the slot. Looked up once per transaction: a forger cannot register
    // a slot, and its messages cost one query per transaction.
    if (message.transactional()) check_still_unregistered();
    reject_message(message,
                   "this relay was not started with --table-less, and no table-less "
                   "producer writes to its slot (its slot is not registered for them)");
  } else if (message.prefix == replay_prefix_) {
    // `outbox replay` made published events pending again: what the book remembers as
    // published no longer tells that nothing lower is pending.
    session_.book.forget_published();
  }
}

void CdcSource::take_relation(const cdc::Relation& relation) {
  if (!publications_.witness().empty() && relation.name == "outbox_aggregate_sequences" &&
      relation.namespace_name == options_.schema.name()) {
    if (const auto problem = session_.witness.map(relation)) {
      throw ConfigError("relay --source cdc: " + *problem +
                        "; run outbox migrate for this relay's version");
    }
    return;
  }
  if (relation.relation_id != publications_.table_oid()) {
    // Another table in a shared publication, or an outbox table dropped since (the slot still
    // holds its WAL): not ours. Its inserts are skipped (take_insert).
    return;
  }
  auto mapped = cdc::map_outbox_columns(relation);
  if (const auto* error = std::get_if<cdc::DecodeError>(&mapped)) {
    throw ConfigError("relay --source cdc: " + error->message +
                      "; run outbox migrate for this relay's version");
  }
  session_.columns = std::get<cdc::OutboxColumns>(std::move(mapped));
}

void CdcSource::take_insert(const cdc::Insert& insert) {
  cdc::StreamBook& book = session_.book;
  if (session_.witness.knows(insert.relation_id)) {
    session_.witness.note(insert.relation_id, insert.columns);
    return;
  }
  if (!session_.columns || insert.relation_id != session_.columns->relation_id) return;
  session_.table_rows = true;  // table-less events are checked from now on (asked_about)
  auto decoded = cdc::decode_outbox_insert(insert, *session_.columns);
  if (const auto* error = std::get_if<cdc::DecodeError>(&decoded)) {
    log().warn("relay {}: {}; the row is left to the table path", options_.relay_id,
               error->message);
    return;
  }
  cdc::StreamedRow& row = std::get<cdc::StreamedRow>(decoded);
  if (!row.due || book.spilled()) return;  // the table path claims it
  // A row with the id of a table-less event the book holds (the caller gave both the same id):
  // the book counts events by id, so the row is left to the table path.
  if (!session_.table_less.empty() && book.contains(row.event.event_id)) return;
  const std::uint64_t bytes = row.event.payload.size() + row.event.headers.size();
  if (book.reading_bytes() + bytes > options_.max_in_flight_bytes) {
    // A transaction larger than the relay may hold: its events stay in the table.
    log().info(
        "relay {}: a transaction with more than {} bytes of events is left to the "
        "relay's own claim",
        options_.relay_id, options_.max_in_flight_bytes);
    book.spill();
    materialize_left(false);  // table-less events read before it in this transaction
    return;
  }
  book.add(std::move(row.event), bytes);
}

std::int64_t CdcSource::certain_position() const {
  return slot_mode::certain_position(session_.book.position_time(), session_.book.open_events(),
                                     session_.caught_up_time);
}

// Untouched rows older than this are the table path's (slot_mode::stream_horizon).
ClaimHorizon CdcSource::horizon() const {
  return slot_mode::stream_horizon(
      certain_position(),
      std::chrono::duration_cast<std::chrono::microseconds>(options_.cdc.horizon_grace));
}

// With nothing open, asks the server how far its WAL is flushed (and what time it is), and asks
// the walsender for a keepalive: once the stream has received that far, every transaction
// committed before that time has been read.
bool CdcSource::probe_caught_up() {
  if (session_.probe || session_.book.open_events() > 0 || session_.book.in_transaction()) {
    return false;
  }
  const std::optional<cdc::ClockAndFlush> now = cdc::clock_and_flush(table_.connection());
  if (!now) return false;
  session_.probe.emplace(now->server_time, now->flushed);
  send_status(true);
  return true;
}

// Reports the confirmable position (and asks for a keepalive when `ask_reply`).
void CdcSource::send_status(bool ask_reply) {
  // No position past a table-less event the book left and nothing has written yet.
  if (!session_.hold_position) materialize_left(false);
  if (session_.hold_position) return;  // a table-less event may be nowhere but in the WAL after it
  const cdc::Lsn confirmable = session_.book.confirmable();
  cdc::ReplicationStream& stream = *session_.stream;
  stream.send_status(stream.received_lsn(), confirmable, confirmable, ask_reply);
  session_.confirmed_sent = std::max(session_.confirmed_sent, confirmable);
  resume_.confirmed(stream.identity(), confirmable);
  save_position(confirmable);
}

void CdcSource::restart_with_witness() {
  send_status(false);
  log().info("relay {}: the WAL from before publication {} is done; streaming with it",
             options_.relay_id, printable(publications_.witness()));
  publications_.proven_from_now();
  session_.stream->stop(std::chrono::seconds(1));
  start_stream();
}

}  // namespace outbox::detail
