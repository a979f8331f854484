#include "relay/cdc/cdc_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_set>

#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "outbox/producer.hpp"
#include "pg/array_literal.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

namespace {

using cdc::Lsn;
using cdc::PgTimestamp;
using std::chrono::milliseconds;

// Reading stops here until the loop has taken what was read: the stream's own memory bound.
constexpr std::size_t kMostMessagesPerRead = 20000;
// The largest message a producer's statement writes: its events' text is at most
// kMaxEnqueueStatementBytes, and each byte of a payload may take six in a JSON string (\u001f).
constexpr std::size_t kMaxTableLessMessageBytes = 6 * kMaxEnqueueStatementBytes + 1024 * 1024;

}  // namespace

CdcSource::CdcSource(const RelayOptions& options, RelayCounters& counters)
    : options_(options),
      counters_(counters),
      slot_(shard_slot_name(options.cdc)),
      publication_(shard_publication_name(options.cdc, options.cdc.publication.empty()
                                                           ? options.schema.name() + "_outbox"
                                                           : options.cdc.publication)),
      table_(options, counters),
      check_sql_(relay_sql::check_streamed(options.schema)),
      message_prefix_(options.schema.message_prefix()),
      replay_prefix_(options.schema.replay_message_prefix()) {
  cdc::validate_slot_name(slot_);
  cdc::validate_publication_name(publication_);
  if (options_.cdc.table_less) {
    witness_publication_ = publication_ + "_seq";
    if (witness_publication_.size() > 63) {
      throw ConfigError(fmt::format(
          "relay --source cdc --table-less: the publication name {} leaves no room for its "
          "companion {}_seq (PostgreSQL names have at most 63 bytes); give --publication "
          "a name of at most 59 bytes",
          printable(publication_), printable(publication_)));
    }
  }
  ensure_publications();
  check_table_less_registration();
  drop_other_shardings();
  if (try_start_stream()) {
    table_.set_listening(false);  // registered awake: producers never notify a streaming relay
  } else {
    wait_as_standby();
  }
}

CdcSource::~CdcSource() = default;

// The publications the slot streams: created when missing. CREATE PUBLICATION needs CREATE on
// the database and ownership of the table; a relay role without them gets the statement to run.
void CdcSource::ensure_publications() {
  PGconn* conn = table_.connection();
  const std::string wal_level(pg::exec(conn, "SHOW wal_level").text(0, 0));
  if (wal_level != "logical") {
    throw ConfigError(fmt::format(
        "relay --source cdc: the server's wal_level is {}; set wal_level = logical (and "
        "restart PostgreSQL) or run the polling relay",
        wal_level));
  }
  const std::string table = options_.schema.table("outbox_events");
  table_oid_ = static_cast<std::uint32_t>(
      pg::exec(conn, "SELECT $1::regclass::oid::bigint", {table.c_str()}).int64(0, 0));
  // A shard's publication has a row filter: its shard's aggregates only.
  const std::string filter =
      options_.cdc.shards <= 1
          ? std::string()
          : " WHERE (" + relay_sql::shard_condition("", options_.cdc.shards, options_.cdc.shard) +
                ")";
  ensure_publication(publication_, table, "insert", filter);
  if (!witness_publication_.empty()) {
    // Every statement of a table-less producer inserts or updates its aggregate's counter.
    const std::string counters = options_.schema.table("outbox_aggregate_sequences");
    ensure_publication(witness_publication_, counters, "insert, update", "");
    // One made by hand may leave out what the proof needs: every message of an aggregate that
    // had a counter already would be refused, and a table-less event has no other copy.
    const auto shape =
        pg::exec(table_.connection(),
                 "SELECT p.pubinsert AND p.pubupdate AND r.prqual IS NULL AND r.prattrs IS NULL "
                 "FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid "
                 "WHERE p.pubname = $1 AND r.prrelid = $2::regclass",
                 {witness_publication_.c_str(), counters.c_str()});
    if (shape.rows() == 1 && shape.text(0, 0) != "t") {
      throw ConfigError(fmt::format(
          "relay --source cdc --table-less: publication {} must publish inserts and updates of "
          "every row and column of {} (it proves which messages are a producer's); it has a "
          "row filter, a column list or leaves inserts or updates out. Drop it and let the relay "
          "make it again: DROP PUBLICATION {}",
          printable(witness_publication_), counters,
          pg::quote_identifier(table_.connection(), witness_publication_)));
    }
  }
}

void CdcSource::ensure_publication(const std::string& name, const std::string& table,
                                   const std::string& publish, const std::string& filter) {
  PGconn* conn = table_.connection();
  const auto found = pg::exec(conn,
                              "SELECT EXISTS (SELECT 1 FROM pg_publication_rel r JOIN "
                              "pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1 AND "
                              "r.prrelid = $2::regclass)::text, "
                              "EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)::text",
                              {name.c_str(), table.c_str()});
  if (found.text(0, 0) == "true") return;
  // Missing, or there without this table (the schema was dropped and migrated again).
  const std::string statement =
      found.text(0, 1) == "true"
          ? fmt::format("ALTER PUBLICATION {} ADD TABLE {}{}", pg::quote_identifier(conn, name),
                        table, filter)
          : fmt::format("CREATE PUBLICATION {} FOR TABLE {}{} WITH (publish = '{}')",
                        pg::quote_identifier(conn, name), table, filter, publish);
  try {
    pg::exec(conn, statement);
  } catch (const DatabaseError& error) {
    if (error.sqlstate() == "42710") return;  // another relay created or changed it meanwhile
    if (error.retryable()) throw;
    throw ConfigError(fmt::format(
        "relay --source cdc: publication {} does not publish {} and this role cannot change "
        "that ({}); run as the table's owner: {}",
        printable(name), table, error.what(), statement));
  }
  log().info("relay {}: {}", options_.relay_id, statement);
}

std::vector<std::string> CdcSource::stream_publications() const {
  if (witness_publication_.empty() || unproven_until_ != 0) return {publication_};
  return {publication_, witness_publication_};
}

// No leading zeros, 2 <= n <= kMaxShards, i < n.
std::optional<unsigned> sharding_of(std::string_view rest) {
  if (rest.empty()) return 1U;
  const auto number = [](std::string_view digits) -> std::optional<unsigned> {
    if (digits.empty() || digits.size() > 2 || (digits.size() > 1 && digits[0] == '0')) {
      return std::nullopt;
    }
    unsigned value = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    return value;
  };
  if (!rest.starts_with('_')) return std::nullopt;
  const std::size_t of = rest.find("_of_");
  if (of == std::string_view::npos) return std::nullopt;
  const std::optional<unsigned> shard = number(rest.substr(1, of - 1));
  const std::optional<unsigned> shards = number(rest.substr(of + 4));
  if (!shard || !shards || *shards < 2 || *shards > kMaxShards || *shard >= *shards) {
    return std::nullopt;
  }
  return shards;
}

// Slots of another sharding of the same slot name ("<slot>" and "<slot>_<i>_of_<n>" for another
// n) that no relay streams from: left by a change of cdc.shards, they would hold WAL forever. The
// table is the truth, so dropping them loses nothing: what they held and no relay marked is
// pending, and older than the new slots' horizons.
void CdcSource::drop_other_shardings() {
  next_sharding_sweep_ = Clock::now() + kShardingSweepEvery;  // again later: one active now
  const std::string& base = options_.cdc.slot;
  const auto slots = pg::exec(
      table_.connection(),
      "SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database() "
      "AND plugin = 'pgoutput' AND NOT active AND starts_with(slot_name::text, $1) "
      "AND slot_name::text NOT IN (SELECT slot_name FROM " +
          options_.schema.table("outbox_table_less_slots") + ")",  // the only copy of events
      {base.c_str()});
  for (int row = 0; row < slots.rows(); ++row) {
    const std::string name(slots.text(row, 0));
    const std::optional<unsigned> shards = sharding_of(name.substr(base.size()));
    if (!shards || *shards == options_.cdc.shards) continue;  // not a sharding of ours, or ours
    try {
      pg::exec(table_.connection(), "SELECT pg_drop_replication_slot($1)", {name.c_str()});
      log().warn(
          "relay {}: dropped slot {} of another sharding than {} shard(s); the table "
          "path publishes what it held",
          options_.relay_id, name, options_.cdc.shards);
    } catch (const DatabaseError& error) {
      if (error.retryable() && error.sqlstate() != "55006" && error.sqlstate() != "42704") throw;
      log().info("relay {}: slot {} of another sharding not dropped: {}", options_.relay_id, name,
                 error.what());
    }
  }
}

// A new replication connection, the slot (created when missing, again when invalidated: the
// table path then publishes what the lost slot held), streaming from its confirmed position.
// Another relay may drop or create the same slot meanwhile (two relays that both found it lost):
// such a race is looked at again, a few times, before it counts as an error.
void CdcSource::start_stream() {
  stream_.reset();
  book_ = cdc::StreamBook{};
  table_less_.clear();  // read again from the confirmed position
  hold_position_ = false;
  columns_.reset();
  witness_ = cdc::SequenceWitness{};
  witness_due_ = false;
  caught_up_time_ = 0;
  probe_.reset();
  cdc::ReplicationStreamOptions stream_options;
  stream_options.application_name = std::string(kRelayApplicationName);
  stream_options.wal_sender_timeout = options_.cdc.takeover;
  stream_options.status_interval = options_.cdc.takeover / 3;
  stream_ = std::make_unique<cdc::ReplicationStream>(options_.database_url, stream_options);
  for (int attempt = 1;; ++attempt) {
    try {
      if (drop_slot_first_) drop_outlived_slot();
      prepare_slot();
      stream_->start(slot_, stream_publications(), start_position());
      break;
    } catch (const cdc::ReplicationError& error) {
      const cdc::ReplicationFailure failure = error.failure();
      const bool raced = failure == cdc::ReplicationFailure::slot_invalidated ||
                         failure == cdc::ReplicationFailure::slot_missing ||
                         failure == cdc::ReplicationFailure::slot_exists;
      if (!raced) throw;
      if (attempt == 3) {
        // Other relays keep dropping and creating it: an outage of the slot, tried again later.
        throw DatabaseError(
            fmt::format("slot {}: raced with other relays three times ({})", slot_, error.what()),
            error.sqlstate(), true);
      }
    }
  }
  confirmed_sent_ = 0;
}

// Where to start streaming when that is past the slot's saved position: after a crash PostgreSQL
// restarts a slot at its position of the last checkpoint and would bring again every transaction
// since. Rows it brings again are found finished; table-less events have no row to say so, and
// each would be published again. A table-less relay starts from the position saved with its
// registration (written durably, so it goes back with the data if the server does: a snapshot
// restored keeps the system id and timeline, and starting past its WAL end would skip new
// commits); any other from the furthest it confirmed itself on this server and timeline (what it
// would skip on rows is pending in the table, and the table path publishes it). 0: the slot's.
cdc::Lsn CdcSource::start_position() {
  if (options_.cdc.table_less) {
    const auto saved = pg::exec(table_.connection(),
                                "SELECT coalesce(confirmed_lsn::text, '') FROM " +
                                    options_.schema.table("outbox_table_less_slots") +
                                    " WHERE slot_name = $1 AND confirmed_system = $2",
                                {slot_.c_str(), stream_->identity().system_id.c_str()});
    if (saved.rows() == 0 || saved.text(0, 0).empty()) return 0;
    return cdc::parse_lsn(saved.text(0, 0)).value_or(0);
  }
  const cdc::SystemIdentity& server = stream_->identity();
  const bool same_server =
      done_.lsn != 0 && server.system_id == done_.system_id && server.timeline == done_.timeline;
  return same_server ? done_.lsn : 0;
}

// A table-less relay saves its confirmed position with its registration, durably, at most once a
// second (start_position).
void CdcSource::save_position(cdc::Lsn confirmed) {
  if (!options_.cdc.table_less || confirmed <= saved_position_ ||
      Clock::now() < next_position_save_) {
    return;
  }
  const std::string lsn = cdc::format_lsn(confirmed);
  pg::exec(table_.connection(),
           "WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)) UPDATE " +
               options_.schema.table("outbox_table_less_slots") +
               " SET confirmed_lsn = CASE WHEN confirmed_system = $3 THEN "
               "greatest(coalesce(confirmed_lsn, '0/0'), $2::pg_lsn) ELSE $2::pg_lsn END, "
               "confirmed_system = $3 FROM durable WHERE slot_name = $1",
           {slot_.c_str(), lsn.c_str(), stream_->identity().system_id.c_str()});
  saved_position_ = confirmed;
  next_position_save_ = Clock::now() + std::chrono::seconds(1);
}

// PostgreSQL 15 decodes a change under the catalog as it was when the change was written, and
// looks up every publication the stream names there: one created after the slot's unread WAL was
// written ends the stream with "publication ... does not exist" at the first change, again on
// every start (a slot made before its publication, an --publication given to a relay with an old
// slot, or a table-less slot from before the witness publication). When every publication exists
// now, that is what happened: a slot of the table path's relay is made again (the table is the
// truth: the table path publishes what it held); a table-less slot holds the only copy of its
// events, so it is read without the witness up to the WAL written now, and with it from there.
bool CdcSource::outlived_publication() {
  const std::vector<std::string> names = stream_publications();
  pg::ArrayLiteral wanted;
  for (const std::string& name : names) wanted.add(name);
  const auto found = pg::exec(table_.connection(),
                              "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = "
                              "ANY($1::text[])), pg_current_wal_flush_lsn()::text",
                              {wanted.text().c_str()});
  if (found.int64(0, 0) != static_cast<std::int64_t>(names.size())) return false;
  if (!options_.cdc.table_less) {
    log().warn(
        "relay {}: slot {} holds WAL from before its publication {} existed, which "
        "PostgreSQL cannot decode; making the slot again (the table path publishes what it "
        "held)",
        options_.relay_id, slot_, printable(publication_));
    drop_slot_first_ = true;
    return true;
  }
  if (names.size() == 1) {
    throw ConfigError(fmt::format(
        "relay --source cdc --table-less: slot {} holds WAL from before publication {} existed, "
        "which PostgreSQL 15 cannot decode, and the slot holds the only copy of table-less events "
        "(it is not made again). Was the publication dropped and created again? Stream with the "
        "publication the slot was made with (--publication)",
        slot_, printable(publication_)));
  }
  // Unproven up to where the witness began for this slot; if the stream fails again past that
  // (a transaction open across the publication's creation has changes from before it), up to
  // the WAL of now, which that transaction is behind.
  std::optional<cdc::Lsn> until = cdc::parse_lsn(found.text(0, 1));
  if (!witness_retried_) {
    const auto since = pg::exec(table_.connection(),
                                "SELECT witness_since::text FROM " +
                                    options_.schema.table("outbox_table_less_slots") +
                                    " WHERE slot_name = $1 AND witness_since IS NOT NULL",
                                {slot_.c_str()});
    if (since.rows() == 1) {
      if (const auto lsn = cdc::parse_lsn(since.text(0, 0))) until = lsn;
    }
  }
  if (!until) return false;
  witness_retried_ = true;
  unproven_until_ = *until;
  log().warn(
      "relay {}: slot {} holds WAL from before publication {} (the proof that a "
      "table-less message is a producer's) existed; its table-less messages up to {} are "
      "taken unproven, as before this version, and the stream starts again with the proof "
      "from there",
      options_.relay_id, slot_, printable(witness_publication_), cdc::format_lsn(*until));
  return true;
}

// The slot the stream failed on (outlived_publication); its walsender may take a moment to exit.
void CdcSource::drop_outlived_slot() {
  // Once: a drop that fails (another relay streams the slot now) is not tried again later, when
  // the slot may be a new one; the next stream that fails on the publication asks again.
  drop_slot_first_ = false;
  for (int attempt = 1;; ++attempt) {
    try {
      stream_->drop_slot(slot_);
      break;
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() == cdc::ReplicationFailure::slot_missing) break;
      if (error.failure() != cdc::ReplicationFailure::slot_in_use || attempt == 20) throw;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
}

// start_stream(), or false when another relay streams from the slot (it may let go).
bool CdcSource::try_start_stream() {
  try {
    start_stream();
    return true;
  } catch (const cdc::ReplicationError& error) {
    if (error.failure() != cdc::ReplicationFailure::slot_in_use) throw;
    stream_.reset();
    return false;
  }
}

// Another relay streams from the slot: this one waits for it as a standby, and meanwhile records
// the outcomes of what it has in flight and publishes what only the table path publishes (touched
// rows: retries, released quarantine), beside the streaming relay's own table path.
void CdcSource::wait_as_standby() {
  if (!fallback_since_) {
    log().info("relay {}: slot {} is streamed by another relay; waiting as its standby",
               options_.relay_id, slot_);
  }
  fallback_since_ = Clock::now();
  released_ = false;
  streamed_out_ = false;  // the horizon below is "-infinity": no streamed row is ever claimed
  slot_taken_ = true;
  book_ = cdc::StreamBook{};
  table_less_.clear();
  probe_.reset();
  counters_.polling_fallback.store(false, std::memory_order_relaxed);
  counters_.slot_standby.store(true, std::memory_order_relaxed);
  counters_.forget_slot_gauges();
  table_.set_listening(listening_);
}

void CdcSource::prepare_slot() {
  const std::string& slot = slot_;
  std::optional<cdc::SlotInfo> info = stream_->find_slot(slot);
  if (options_.cdc.table_less && (!info || info->wal_status == cdc::WalStatus::lost) &&
      registered_before_) {
    log().error(
        "relay {}: slot {}, registered for table-less events, is {}: table-less events "
        "committed before it was lost and not yet published are LOST (they were nowhere "
        "else); producers were refused from then until now. Replay them from the broker "
        "or the producers' own records",
        options_.relay_id, slot_, info ? "invalidated (its WAL was removed)" : "missing");
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
      stream_->drop_slot(slot);
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() != cdc::ReplicationFailure::slot_missing) throw;  // dropped already
    }
    info.reset();
  }
  if (!info) {
    try {
      const cdc::CreatedSlot created = stream_->create_slot(slot, false);
      log().info("relay {}: created replication slot {} at {}", options_.relay_id, slot,
                 cdc::format_lsn(created.consistent_point));
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() != cdc::ReplicationFailure::slot_exists) throw;  // another relay's
    }
  }
}

Fetched CdcSource::fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) {
  if (polling()) {
    // Released over the budget: what the stream had out keeps its horizon until it is done, then
    // every pending row. Waiting for a slot another relay streams: touched rows only.
    table_.set_claim_horizon(streamed_out_               ? fallback_horizon_
                             : released_ && !slot_taken_ ? "infinity"
                                                         : "-infinity");
    Fetched claimed = table_.fetch(limit, byte_room, holding_nothing);
    table_caught_up_ =
        claimed.reached_end && !claimed.began_mid_way && claimed.events.size() < limit;
    return claimed;
  }
  read_stream(milliseconds(0));
  Fetched fetched;
  std::uint64_t used = 0;
  for (Event& event : stream_candidates(limit, byte_room, holding_nothing)) {
    used += event.payload.size() + event.headers.size();
    fetched.events.push_back({std::move(event), std::string()});
  }
  RelayCounters::add(counters_.claimed, fetched.events.size());
  if (table_due_ && fetched.events.size() < limit) {
    table_due_ = false;
    table_.set_claim_horizon(horizon());
    Fetched claimed =
        table_.fetch(limit - fetched.events.size(), byte_room > used ? byte_room - used : 0,
                     holding_nothing && fetched.events.empty());
    for (SourcedEvent& event : claimed.events) fetched.events.push_back(std::move(event));
    fetched.waiting_bytes = claimed.waiting_bytes;
    table_due_ = !claimed.reached_end;
  }
  // Rows not visible yet are looked at again at the next turn, not at once.
  fetched.reached_end = (!book_.has_candidates() || deferred_) && !table_due_;
  return fetched;
}

// The book's candidates, looked at in one statement: those whose rows other sessions do not see
// yet wait (asked again at the next fetch); those with a lower sequence of their aggregate
// pending are left to the table path; the rest go.
std::vector<Event> CdcSource::stream_candidates(std::size_t limit, std::uint64_t byte_room,
                                                bool holding_nothing) {
  const cdc::StreamBook::Candidates candidates = book_.next(limit, byte_room, holding_nothing);
  deferred_ = false;
  if (candidates.events.empty()) return book_.decide({});
  pg::ArrayLiteral ids, types, aggregates, sequences, check_lower, xids;
  for (std::size_t i = 0; i < candidates.events.size(); ++i) {
    const Event& event = candidates.events[i];
    const auto table_less = table_less_.find(event.event_id);
    if (table_less == table_less_.end()) {
      xids.add_null();
    } else {
      xids.add_plain(table_less->second.xid);
    }
    ids.add(event.event_id);
    types.add(event.aggregate_type);
    aggregates.add(event.aggregate_id);
    sequences.add_plain(std::to_string(event.aggregate_sequence));
    check_lower.add_plain(candidates.needs_check[i] ? "t" : "f");
  }
  relay_sql::StreamCheck check;
  try {
    const auto result = pg::exec_prepared(
        table_.connection(), check_sql_,
        {ids.text().c_str(), types.text().c_str(), aggregates.text().c_str(),
         sequences.text().c_str(), check_lower.text().c_str(), xids.text().c_str()});
    check = relay_sql::read_check_streamed(result);
  } catch (...) {
    book_.undo_next();  // looked at again after the reconnect
    throw;
  }
  deferred_ = !check.invisible.empty();
  for (const std::size_t finished : check.finished) {
    table_less_.erase(candidates.events[finished].event_id);  // its row went out already
  }
  std::vector<Event> go = book_.decide(check.blocked, check.invisible, check.finished);
  materialize_left(true);
  return go;
}

bool CdcSource::wait_for_news(milliseconds timeout) {
  if (polling()) return table_.wait_for_news(timeout);
  return read_stream(std::min(timeout, stream_->until_status_due()));
}

// A streaming relay looks by itself (registered awake: producers never notify it); a polling one
// listens as the polling relay does.
void CdcSource::set_listening(bool listening) {
  listening_ = listening;
  if (polling()) table_.set_listening(listening);
}

bool CdcSource::read_stream(milliseconds timeout) {
  bool got = false;
  milliseconds wait = timeout;
  for (std::size_t read = 0; read < kMostMessagesPerRead; ++read) {
    if (book_.waiting_bytes() >= options_.max_in_flight_bytes ||
        book_.open_events() >= 2 * options_.max_in_flight || witness_due_) {
      break;  // the loop has enough to do; the server keeps the rest
    }
    std::optional<cdc::StreamMessage> message;
    try {
      message = stream_->read(wait);
    } catch (const cdc::ReplicationError& error) {
      if (error.failure() != cdc::ReplicationFailure::publication_missing ||
          !outlived_publication()) {
        throw;
      }
      start_stream();
      return true;
    }
    if (!message) break;
    got = true;
    wait = milliseconds(0);
    take(*message);
  }
  return got;
}

void CdcSource::take(const cdc::StreamMessage& message) {
  if (const cdc::XLogData* data = message.xlog_data()) {
    take_change(data->payload);
  } else if (const cdc::PrimaryKeepalive* keepalive = message.keepalive()) {
    book_.keepalive(keepalive->wal_end);
  }
  if (probe_ && stream_->received_lsn() >= probe_->second) {
    caught_up_time_ = std::max(caught_up_time_, probe_->first);
    probe_.reset();
  }
}

void CdcSource::take_change(std::string_view payload) {
  cdc::PgOutputMessage change = cdc::decode_pgoutput(payload);
  if (const auto* error = std::get_if<cdc::DecodeError>(&change)) {
    throw DatabaseError(
        "relay --source cdc: a replication message did not decode: " + error->message, "08P01",
        false);
  }
  if (const auto* message = std::get_if<cdc::LogicalMessage>(&change)) {
    if (message->prefix == message_prefix_) {
      if (!options_.cdc.table_less) {
        // A table-less producer writes only while a table-less relay's slot is registered, and a
        // relay without --table-less refuses a registered slot at start. The slot may have been
        // registered since (a table-less relay started as this one's standby, during a switch
        // to table-less): then this relay stops as it would at start, holding the position, and
        // the table-less relay takes the slot. Looked up once per transaction: a forger cannot
        // register a slot, and its messages cost one query per transaction.
        if (message->transactional()) check_still_unregistered();
        reject_message(*message,
                       "this relay was not started with --table-less, and no table-less "
                       "producer writes to its slot (its slot is not registered for them)");
        return;
      }
      take_table_less(*message);
    } else if (message->prefix == replay_prefix_) {
      // `outbox replay` made published events pending again: what the book remembers as
      // published no longer tells that nothing lower is pending.
      book_.forget_published();
    }
    return;
  }
  if (const auto* begin = std::get_if<cdc::Begin>(&change)) {
    if (unproven_until_ != 0 && begin->final_lsn > unproven_until_) {
      // Past the WAL older than the witness publication: read no further until everything
      // before is confirmed, then stream again with the witness (run_duties).
      witness_due_ = true;
      return;
    }
    witness_.begin();
    reading_xid_ = begin->xid;
    reading_commit_time_ = begin->commit_time;
    book_.begin();
  } else if (const auto* commit = std::get_if<cdc::Commit>(&change)) {
    book_.commit(commit->end_lsn, commit->commit_time);
  } else if (const auto* relation = std::get_if<cdc::Relation>(&change)) {
    if (!witness_publication_.empty() && relation->name == "outbox_aggregate_sequences" &&
        relation->namespace_name == options_.schema.name()) {
      if (const auto problem = witness_.map(*relation)) {
        throw ConfigError("relay --source cdc: " + *problem +
                          "; run outbox migrate for this relay's version");
      }
      return;
    }
    if (relation->relation_id != table_oid_) {
      // Another table in a shared publication, or an outbox table dropped since (the slot still
      // holds its WAL): not ours. Its inserts are skipped below.
      return;
    }
    auto mapped = cdc::map_outbox_columns(*relation);
    if (const auto* error = std::get_if<cdc::DecodeError>(&mapped)) {
      throw ConfigError("relay --source cdc: " + error->message +
                        "; run outbox migrate for this relay's version");
    }
    columns_ = std::get<cdc::OutboxColumns>(std::move(mapped));
  } else if (const auto* update = std::get_if<cdc::Update>(&change)) {
    witness_.note(update->relation_id, update->columns);
  } else if (const auto* insert = std::get_if<cdc::Insert>(&change)) {
    if (witness_.knows(insert->relation_id)) {
      witness_.note(insert->relation_id, insert->columns);
      return;
    }
    if (!columns_ || insert->relation_id != columns_->relation_id) return;
    auto decoded = cdc::decode_outbox_insert(*insert, *columns_);
    if (const auto* error = std::get_if<cdc::DecodeError>(&decoded)) {
      log().warn("relay {}: {}; the row is left to the table path", options_.relay_id,
                 error->message);
      return;
    }
    cdc::StreamedRow& row = std::get<cdc::StreamedRow>(decoded);
    if (!row.due || book_.spilled()) return;  // the table path claims it
    // A row with the id of a table-less event the book holds (the caller gave both the same id):
    // the book counts events by id, so the row is left to the table path.
    if (!table_less_.empty() && book_.contains(row.event.event_id)) return;
    const std::uint64_t bytes = row.event.payload.size() + row.event.headers.size();
    if (book_.reading_bytes() + bytes > options_.max_in_flight_bytes) {
      // A transaction larger than the relay may hold: its events stay in the table.
      log().info(
          "relay {}: a transaction with more than {} bytes of events is left to the "
          "relay's own claim",
          options_.relay_id, options_.max_in_flight_bytes);
      book_.spill();
      materialize_left(false);  // table-less events read before it in this transaction
      return;
    }
    book_.add(std::move(row.event), bytes);
  }
}

// Untouched rows older than this are the table path's: the stream's certain position (the
// oldest transaction not done, or a probe that found it caught up) less the grace.
std::string CdcSource::horizon() const {
  const PgTimestamp position =
      std::max(book_.position_time(), book_.open_events() == 0 ? caught_up_time_ : 0);
  if (position == 0) return "-infinity";
  const auto grace =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.cdc.horizon_grace);
  return cdc::format_pg_timestamp(position - grace.count());
}

bool CdcSource::run_duties(Clock::time_point now, const SendWindow& window) {
  if (witness_due_ && !polling() && book_.open_events() == 0 && table_less_.empty() &&
      !hold_position_) {
    send_status(false);
    log().info("relay {}: the WAL from before publication {} is done; streaming with it",
               options_.relay_id, printable(witness_publication_));
    unproven_until_ = 0;
    stream_->stop(std::chrono::seconds(1));
    start_stream();
  }
  bool news = table_.run_duties(now, window);
  if (polling()) {
    news = fallback_duties(now, window) || news;
  } else if (now >= next_table_poll_) {
    next_table_poll_ = now + options_.cdc.table_poll;
    table_due_ = true;
    news = true;
    if (!probe_caught_up() && book_.confirmable() > confirmed_sent_) send_status(false);
  }
  if (!retry_published_.empty()) {
    std::vector<Outcome> retry = std::move(retry_published_);
    retry_published_.clear();
    write_streamed(retry, false);
  }
  if (!retry_failed_.empty()) {
    std::vector<Outcome> retry = std::move(retry_failed_);
    retry_failed_.clear();
    write_streamed(retry, true);
  }
  if (polling()) return news;
  if (stream_->status_due()) send_status(false);
  if (now >= next_sharding_sweep_) drop_other_shardings();
  if (now >= next_slot_look_) {
    next_slot_look_ = now + kSlotLookEvery;
    if (look_at_slot()) return true;  // let go: the table path claims from now on
  }
  return news;
}

// The slot's lag: WAL it holds back and has not been confirmed (bytes), and how old the oldest
// committed event the stream owes may be (its certain position's age). Past the budget it is
// let go.
bool CdcSource::look_at_slot() {
  const auto result =
      pg::exec(table_.connection(),
               "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text, "
               "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint::text, "
               "((extract(epoch FROM clock_timestamp()) - 946684800) * 1000000)::bigint::text "
               "FROM pg_replication_slots WHERE slot_name = $1",
               {slot_.c_str()});
  if (result.rows() == 0 || result.is_null(0, 0) || result.is_null(0, 1)) return false;
  const std::int64_t retained = result.int64(0, 0);
  RelayCounters::set(counters_.slot_retained_bytes, retained);
  RelayCounters::set(counters_.slot_lag_bytes, std::max<std::int64_t>(0, result.int64(0, 1)));
  const PgTimestamp position =
      std::max(book_.position_time(), book_.open_events() == 0 ? caught_up_time_ : 0);
  RelayCounters::set(
      counters_.slot_lag_ms,
      position == 0 ? -1 : std::max<std::int64_t>(0, (result.int64(0, 2) - position) / 1000));
  if (options_.cdc.wal_budget == 0 ||
      retained <= static_cast<std::int64_t>(options_.cdc.wal_budget)) {
    return false;
  }
  release_slot(retained);
  return true;
}

void CdcSource::release_slot(std::int64_t retained) {
  log().warn(
      "relay {}: slot {} holds {} MiB of WAL, over the budget of {} MiB (cdc.wal_budget): "
      "letting it go; the relay publishes from the table until it has caught up, then "
      "streams from a new slot",
      options_.relay_id, slot_, retained >> 20, options_.cdc.wal_budget >> 20);
  fallback_horizon_ = horizon();
  fallback_since_ = Clock::now();
  released_ = true;
  slot_taken_ = false;
  streamed_out_ = true;
  table_caught_up_ = false;
  released_walsender_ = stream_->backend_pid();
  try {
    stream_->stop(std::chrono::seconds(1));
  } catch (const DatabaseError& error) {
    log().debug("relay {}: ending the replication stream: {}", options_.relay_id, error.what());
  }
  stream_.reset();            // the walsender exits and lets the slot go
  book_ = cdc::StreamBook{};  // what was read and is not out stays pending in the table
  table_less_.clear();        // (never table-less: their relays have no budget)
  probe_.reset();
  RelayCounters::add(counters_.slot_released, 1);
  counters_.polling_fallback.store(true, std::memory_order_relaxed);
  counters_.forget_slot_gauges();
  table_.set_listening(listening_);
  drop_released_slot();
}

// Drops the slot we let go once our walsender has left it; one another relay streams from now is
// not ours to drop (its own budget applies).
void CdcSource::drop_released_slot() {
  if (released_walsender_ == 0) return;
  const auto result = pg::exec(
      table_.connection(), "SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = $1",
      {slot_.c_str()});
  if (result.rows() == 0) {
    released_walsender_ = 0;  // gone already (an operator, another relay)
    return;
  }
  if (!result.is_null(0, 0)) {
    if (result.int64(0, 0) == released_walsender_) return;  // ours, still exiting: next turn
    log().info("relay {}: slot {} is streamed by another relay now (walsender {}); not dropping it",
               options_.relay_id, slot_, result.text(0, 0));
    released_walsender_ = 0;
    return;
  }
  try {
    pg::exec(table_.connection(), "SELECT pg_drop_replication_slot($1)", {slot_.c_str()});
    log().info("relay {}: dropped replication slot {}", options_.relay_id, slot_);
  } catch (const DatabaseError& error) {
    if (error.retryable() && error.sqlstate() != "55006" && error.sqlstate() != "42704") throw;
    // 55006: another relay took it meanwhile; 42704: someone dropped it first.
    log().info("relay {}: slot {} not dropped: {}", options_.relay_id, slot_, error.what());
  }
  released_walsender_ = 0;
}

bool CdcSource::fallback_duties(Clock::time_point now, const SendWindow& window) {
  drop_released_slot();
  bool news = false;
  if (streamed_out_ && now >= next_table_poll_) {
    next_table_poll_ = now + options_.cdc.table_poll;
    // Streamed events carry no token and their rows look untouched: while one is in flight or
    // its outcome unwritten, the table path keeps the horizon it had, or it would send them
    // again (its claim takes an aggregate's lowest pending row, so never one behind them).
    const auto streamed = [](const auto& outcome) { return outcome.token.empty(); };
    const bool out = std::any_of(window.in_flight().begin(), window.in_flight().end(),
                                 [](const auto& entry) { return entry.second.token.empty(); }) ||
                     !retry_published_.empty() || !retry_failed_.empty() ||
                     std::any_of(window.published().begin(), window.published().end(), streamed) ||
                     std::any_of(window.failed().begin(), window.failed().end(), streamed);
    if (!out) {
      streamed_out_ = false;
      table_caught_up_ = false;  // the claims so far stopped at the old horizon
      news = true;               // every pending row is claimable now
    }
  }
  if (now < next_stream_try_) return news;
  next_stream_try_ = now + options_.cdc.table_poll;
  // Another relay streams the slot (a standby took it after this one let go, or this one is the
  // standby): wait. A missing slot is created, which waits for every transaction writing at that
  // moment to end, and the loop with it: after a release, not while one has been writing for a
  // second already (such a transaction may be why the slot went over the budget).
  const auto seen =
      pg::exec(table_.connection(),
               "SELECT coalesce((SELECT (active_pid IS NOT NULL)::text FROM pg_replication_slots "
               "WHERE slot_name = $1), 'missing'), "
               "(SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
               "AND pid <> pg_backend_pid() AND xact_start < now() - interval '1 second')::text",
               {slot_.c_str()});
  const std::string slot_state(seen.text(0, 0));
  const bool was_taken = slot_taken_;
  slot_taken_ = slot_state == "true" && released_walsender_ == 0;
  if (slot_taken_ != was_taken) news = true;  // the horizon changed
  if (slot_state == "true") return news;
  if (released_ && (streamed_out_ || !table_caught_up_ || released_walsender_ != 0 ||
                    now - *fallback_since_ <
                        std::max<Clock::duration>(options_.cdc.horizon_grace, kSlotLookEvery))) {
    return news;
  }
  // Only after a release: a standby that finds the slot missing (dropped while it waited, or its
  // streaming relay's and its own start crossed the drop) creates it at once, or no relay would.
  if (released_ && slot_state == "missing" && seen.int64(0, 1) > 0) {
    log().debug(
        "relay {}: not creating slot {} while {} transaction(s) have been writing for "
        "over a second (creating it would wait for them)",
        options_.relay_id, slot_, seen.text(0, 1));
    return news;
  }
  bool streaming = false;
  try {
    streaming = try_start_stream();
  } catch (const DatabaseError& error) {
    if (!error.retryable()) throw;
    log().info("relay {}: streaming from slot {} failed ({}); polling on", options_.relay_id, slot_,
               error.what());
    stream_.reset();
  }
  if (!streaming) {
    if (released_) fallback_since_ = now;  // caught up again after another horizon_grace
    return news;
  }
  log().info("relay {}: streaming from slot {}{}", options_.relay_id, slot_,
             released_ ? " again, caught up from the table" : " (was the standby)");
  fallback_since_.reset();
  released_ = false;
  slot_taken_ = false;
  counters_.polling_fallback.store(false, std::memory_order_relaxed);
  counters_.slot_standby.store(false, std::memory_order_relaxed);
  table_.set_listening(false);  // registered awake again
  next_table_poll_ = now;
  return true;
}

// With nothing open, asks the server how far its WAL is flushed (and what time it is), and asks
// the walsender for a keepalive: once the stream has received that far, every transaction
// committed before that time has been read.
bool CdcSource::probe_caught_up() {
  if (probe_ || book_.open_events() > 0 || book_.in_transaction()) return false;
  const auto result = pg::exec(
      table_.connection(),
      "SELECT ((extract(epoch FROM clock_timestamp()) - 946684800) * 1000000)::bigint::text, "
      "pg_current_wal_flush_lsn()::text");
  const std::optional<Lsn> flushed = cdc::parse_lsn(result.text(0, 1));
  if (!flushed) return false;
  probe_.emplace(result.int64(0, 0), *flushed);
  send_status(true);
  return true;
}

// Reports the confirmable position (and asks for a keepalive when `ask_reply`).
void CdcSource::send_status(bool ask_reply) {
  // No position past a table-less event the book left and nothing has written yet.
  if (!hold_position_) materialize_left(false);
  if (hold_position_) return;  // a table-less event may be nowhere but in the WAL after it
  const Lsn confirmable = book_.confirmable();
  stream_->send_status(stream_->received_lsn(), confirmable, confirmable, ask_reply);
  confirmed_sent_ = std::max(confirmed_sent_, confirmable);
  if (confirmable > done_.lsn || stream_->identity().system_id != done_.system_id ||
      stream_->identity().timeline != done_.timeline) {
    done_ = {stream_->identity().system_id, stream_->identity().timeline, confirmable};
  }
  save_position(confirmable);
}

CdcSource::Clock::time_point CdcSource::next_duty() const {
  if (polling()) return std::min(table_.next_duty(), Clock::now() + options_.cdc.table_poll);
  return std::min(
      {table_.next_duty(), next_table_poll_, Clock::now() + stream_->until_status_due()});
}

bool CdcSource::reconnect(SendWindow& window) {
  const bool reconnected = table_.reconnect(window);
  if (polling()) return reconnected;  // streams again when it may (fallback_duties)
  if (try_start_stream()) {
    table_.set_listening(false);
  } else {
    wait_as_standby();
  }
  return reconnected;
}

void CdcSource::leave() noexcept {
  table_.leave();
  try {
    if (stream_ && stream_->streaming()) {
      send_status(true);
      stream_->stop(std::chrono::seconds(1));
    }
  } catch (const std::exception& error) {
    log().debug("relay {}: ending the replication stream: {}", options_.relay_id, error.what());
  }
}

std::vector<SourcedEvent> CdcSource::record_published(std::vector<Outcome>& published,
                                                      bool take_successors,
                                                      std::uint64_t successor_bytes) {
  std::vector<Outcome> streamed = std::move(retry_published_), claimed;
  retry_published_.clear();
  for (Outcome& outcome : published) {
    (outcome.token.empty() ? streamed : claimed).push_back(std::move(outcome));
  }
  published.clear();
  std::vector<SourcedEvent> successors;
  try {
    successors = table_.record_published(claimed, take_successors, successor_bytes);
    write_streamed(streamed, false);
  } catch (...) {
    for (Outcome& outcome : claimed) published.push_back(std::move(outcome));
    for (Outcome& outcome : streamed) published.push_back(std::move(outcome));
    throw;
  }
  return successors;
}

void CdcSource::record_failed(std::vector<Outcome>& failed) {
  std::vector<Outcome> streamed = std::move(retry_failed_), claimed;
  retry_failed_.clear();
  for (Outcome& outcome : failed) {
    (outcome.token.empty() ? streamed : claimed).push_back(std::move(outcome));
  }
  failed.clear();
  try {
    table_.record_failed(claimed);
    write_streamed(streamed, true);
  } catch (...) {
    for (Outcome& outcome : claimed) failed.push_back(std::move(outcome));
    for (Outcome& outcome : streamed) failed.push_back(std::move(outcome));
    throw;
  }
}

// Writes streamed outcomes; the book hears of those written. A row not there to write is most
// often one whose transaction other sessions do not see committed yet (decoded a moment before
// it leaves the proc array): it is tried again at the next turn. One still not there after
// kUnwrittenGiveUp belongs to another claim (a straggler claim, an operator's skip): counted as
// fenced, as in polling.
void CdcSource::write_streamed(std::vector<Outcome>& outcomes, bool failed) {
  if (outcomes.empty()) return;
  if (!table_less_.empty()) {
    // Table-less events: published, they are done (no row to mark); failed, they get their row
    // first, and the failure is then recorded on it as on any streamed row.
    std::vector<EventId> to_write;
    std::vector<Outcome> rows;
    for (Outcome& outcome : outcomes) {
      const bool table_less = table_less_.contains(outcome.event_id);
      if (table_less && !book_.is_out(outcome.event_id)) {
        // A send from before the stream restarted, of an event the new stream brought again
        // and this book has not sent yet: it sends it (the position never passed it). An
        // outcome of such a send that comes before the event is read again takes the row path
        // and finds no row: counted fenced after kUnwrittenGiveUp, and the book ignores it.
        continue;
      }
      if (!table_less) {
        rows.push_back(std::move(outcome));
      } else if (failed) {
        to_write.push_back(outcome.event_id);
        rows.push_back(std::move(outcome));
      } else {
        table_less_.erase(outcome.event_id);
        RelayCounters::add(counters_.published, 1);
        counters_.by_type.add(outcome.type, TypedCounts::published);
        book_.published(outcome.event_id);
      }
    }
    outcomes = std::move(rows);
    materialize(to_write, true);
    if (outcomes.empty()) return;
  }
  std::vector<EventId> ids;
  for (const Outcome& outcome : outcomes) ids.push_back(outcome.event_id);
  std::vector<Outcome> unwritten;
  if (failed) {
    table_.record_streamed_failed(outcomes, unwritten);
  } else {
    table_.record_streamed_published(outcomes, unwritten);
  }
  std::unordered_set<EventId, cdc::StreamBook::IdHash> missing;
  for (const Outcome& outcome : unwritten) missing.insert(outcome.event_id);
  const auto done = [&](const EventId& id) {
    unwritten_since_.erase(id);
    if (failed) {
      book_.failed(id);
    } else {
      book_.published(id);
    }
  };
  for (const EventId& id : ids) {
    if (!missing.contains(id)) done(id);
  }
  const auto now = Clock::now();
  for (Outcome& outcome : unwritten) {
    const auto since = unwritten_since_.try_emplace(outcome.event_id, now).first->second;
    if (now - since < kUnwrittenGiveUp) {
      (failed ? retry_failed_ : retry_published_).push_back(std::move(outcome));
      continue;
    }
    RelayCounters::add(counters_.fenced, 1);
    counters_.by_type.add(outcome.type, TypedCounts::fenced);
    log().warn(
        "relay {}: event {}: its row is not ours to complete (claimed by another, or "
        "skipped); a duplicate publish is possible",
        options_.relay_id, outcome.event_id.to_string());
    done(outcome.event_id);
  }
  if (failed) materialize_left(true);  // table-less events that waited behind a failed one
}

// A table-less relay registers its slot (producers write table-less events only while a
// registered slot exists); any other refuses a registered one: it would skip those events, or
// let the slot go over its budget.
void CdcSource::check_table_less_registration() {
  PGconn* conn = table_.connection();
  const std::string table = options_.schema.table("outbox_table_less_slots");
  if (!options_.cdc.table_less) {
    const auto found =
        pg::exec(conn, "SELECT relay_id FROM " + table + " WHERE slot_name = $1", {slot_.c_str()});
    if (found.rows() == 0) return;
    throw ConfigError(fmt::format(
        "relay --source cdc: slot {} is registered for table-less events (by relay {}, in {}): "
        "start this relay with --table-less (cdc.table_less), or use another slot. If no "
        "producer writes table-less events any more and the slot holds none: DELETE FROM {} "
        "WHERE slot_name = '{}'",
        slot_, printable(found.text(0, 0)), table, table, slot_));
  }
  const auto registered = pg::exec(
      conn,
      // witness_since: the first time a relay of this version saw the slot (the witness
      // publication exists by now): WAL before it may predate the publication.
      "INSERT INTO " + table +
          " AS t (slot_name, relay_id, witness_since) VALUES ($1, $2, "
          "pg_current_wal_insert_lsn()) ON CONFLICT (slot_name) DO UPDATE SET relay_id = "
          "EXCLUDED.relay_id, witness_since = coalesce(t.witness_since, EXCLUDED.witness_since) "
          "RETURNING (t.xmax <> 0)::text",
      {slot_.c_str(), options_.relay_id.c_str()});
  registered_before_ = registered.text(0, 0) == "true";
}

// One producer statement's events (ProducerOptions::table_less): read like inserted rows, or,
// in a transaction too large to hold, written to the table at once.
void CdcSource::check_still_unregistered() {
  if (registration_checked_xid_ == reading_xid_) return;
  registration_checked_xid_ = reading_xid_;
  const auto found =
      pg::exec(table_.connection(),
               "SELECT relay_id FROM " + options_.schema.table("outbox_table_less_slots") +
                   " WHERE slot_name = $1",
               {slot_.c_str()});
  if (found.rows() == 0) return;
  hold_position_ = true;  // the slot keeps the message for the table-less relay
  throw ConfigError(fmt::format(
      "relay --source cdc: slot {} was registered for table-less events (by relay {}) while this "
      "relay, started without --table-less, streamed it, and table-less events arrive: stopping "
      "without confirming them, so the table-less relay takes the slot and publishes them",
      slot_, printable(found.text(0, 0))));
}

void CdcSource::take_table_less(const cdc::LogicalMessage& message) {
  if (!message.transactional() || !book_.in_transaction()) {
    reject_message(message, "it is not transactional");
    return;
  }
  // Before it is parsed (any role may emit a message of up to 1 GB, and parsing one takes many
  // times that): a transaction that moved no counter carries no producer's message.
  if (unproven_until_ == 0 && witness_.empty()) {
    reject_message(message,
                   "nothing proves a producer wrote it: its transaction moved no counter "
                   "of outbox_aggregate_sequences (which only producers may write, where "
                   "any role may emit a message: forged, or written by hand)");
    return;
  }
  if (message.content.size() > kMaxTableLessMessageBytes) {
    reject_message(message, fmt::format("it is {} bytes long; a producer writes at most {}",
                                        message.content.size(), kMaxTableLessMessageBytes));
    return;
  }
  std::vector<std::pair<Event, std::uint64_t>> events;
  std::string xid;
  try {
    const nlohmann::json doc = nlohmann::json::parse(message.content);
    xid = doc.at("xid").get<std::string>();
    if (xid.empty() || xid.size() > 20 ||
        xid.find_first_not_of("0123456789") != std::string::npos) {
      throw std::invalid_argument("xid is not a transaction id");
    }
    // The transaction that carries the message: its xid's low 32 bits are Begin's. One naming
    // another transaction would wait for that one's visibility, perhaps forever.
    if (static_cast<std::uint32_t>(std::stoull(xid) & 0xFFFFFFFFULL) != reading_xid_) {
      throw std::invalid_argument("xid is not the transaction's that carries the message");
    }
    const auto occurred_at = doc.at("occurred_at").get<std::string>();
    const auto aggregate_type = doc.at("aggregate_type").get<std::string>();
    const auto aggregate_id = doc.at("aggregate_id").get<std::string>();
    const nlohmann::json& items = doc.at("events");
    if (!items.is_array() || items.empty()) throw std::invalid_argument("no events");
    for (const nlohmann::json& item : items) {
      Event event;
      const std::optional<EventId> id = EventId::parse(item.at("event_id").get<std::string>());
      if (!id) throw std::invalid_argument("event_id is not a UUID");
      event.event_id = *id;
      event.aggregate_type = aggregate_type;
      event.aggregate_id = aggregate_id;
      const nlohmann::json& sequence = item.at("sequence");
      const nlohmann::json& version = item.at("schema_version");
      if (!sequence.is_number_integer() || !version.is_number_integer() ||
          sequence.get<std::int64_t>() < 1 || version.get<std::int64_t>() < 1 ||
          version.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
        throw std::invalid_argument("sequence or schema_version is not a positive integer");
      }
      event.aggregate_sequence = sequence.get<std::int64_t>();
      event.event_type = item.at("event_type").get<std::string>();
      event.schema_version = static_cast<std::int32_t>(version.get<std::int64_t>());
      event.payload = item.at("payload").get<std::string>();
      event.headers = item.at("headers").get<std::string>();
      event.occurred_at = occurred_at;
      // What the table would refuse, refused here: such an event could be neither sent as the
      // producer's nor written to the table.
      if (event.aggregate_type.empty() || event.aggregate_id.empty() || event.event_type.empty() ||
          !nlohmann::json::accept(event.payload) || !nlohmann::json::accept(event.headers) ||
          !nlohmann::json::parse(event.headers).is_object()) {
        throw std::invalid_argument("an empty name, or payload or headers not JSON");
      }
      const std::uint64_t bytes = event.payload.size() + event.headers.size();
      events.emplace_back(std::move(event), bytes);
    }
  } catch (const std::exception& error) {
    // Not what an outbox producer writes (its statement builds the message): nothing to publish.
    reject_message(message, std::string("it is not an outbox producer's message: ") + error.what());
    return;
  }
  // A producer's statement numbers its events one after another up to the counter it wrote.
  for (std::size_t i = 1; i < events.size(); ++i) {
    if (events[i].first.aggregate_sequence != events[i - 1].first.aggregate_sequence + 1) {
      reject_message(message, "its events' sequences do not follow one another");
      return;
    }
  }
  const Event& last = events.back().first;
  if (unproven_until_ == 0 &&
      !witness_.vouch(last.aggregate_type, last.aggregate_id, last.aggregate_sequence)) {
    reject_message(
        message,
        fmt::format("nothing proves a producer wrote it: its transaction did not move the counter "
                    "of aggregate {} {} to {} before it (outbox_aggregate_sequences, which only "
                    "producers may write, where any role may emit a message: forged, or written "
                    "by hand)",
                    printable(last.aggregate_type), printable(last.aggregate_id),
                    last.aggregate_sequence));
    return;
  }
  std::vector<EventId> to_write;
  for (auto& [event, bytes] : events) {
    const EventId id = event.event_id;
    if (table_less_.contains(id) || book_.contains(id)) {
      // The same id twice (a caller that supplies ids and retried, or reused one): nothing keeps
      // a table-less producer from it, and the book counts an event by its id. The same id is the
      // same event to every consumer; the first is published, this one is not.
      log().warn(
          "relay {}: table-less event {} ({} {} #{}) has the id of an event not yet "
          "published; it is not published again",
          options_.relay_id, id.to_string(), printable(event.aggregate_type),
          printable(event.aggregate_id), event.aggregate_sequence);
      continue;
    }
    table_less_.insert_or_assign(id, TableLess{event, xid, reading_commit_time_});
    if (!book_.spilled() && book_.reading_bytes() + bytes > options_.max_in_flight_bytes) {
      log().info(
          "relay {}: a transaction with more than {} bytes of events is left to the "
          "relay's own claim (its table-less events are written to the table)",
          options_.relay_id, options_.max_in_flight_bytes);
      book_.spill();
    }
    if (book_.spilled()) {
      to_write.push_back(id);
    } else {
      book_.add(std::move(event), bytes);
    }
  }
  if (book_.spilled()) {
    std::vector<EventId> left = book_.take_left();
    left.insert(left.end(), to_write.begin(), to_write.end());
    // Untouched rows: the table path takes them only past the stream's horizon, so an earlier
    // event of their aggregate that the book still holds (it has no row) goes first.
    materialize(left, false);
  }
}

void CdcSource::reject_message(const cdc::LogicalMessage& message, const std::string& why) {
  RelayCounters::add(counters_.messages_rejected, 1);
  log().error(
      "relay {}: a logical decoding message with prefix {} at {} (transaction {}) is not "
      "published: {}. Counted in outbox_relay_cdc_messages_rejected_total; the relay goes "
      "on",
      options_.relay_id, message_prefix_, cdc::format_lsn(message.lsn), reading_xid_,
      printable(why));
}

// Writes the table-less events among `ids` to the table, once their transactions are visible
// to other sessions (an event must not be announced, from the table either, before that).
void CdcSource::materialize(const std::vector<EventId>& ids, bool touched) {
  std::vector<std::pair<EventId, const TableLess*>> rows;
  for (const EventId& id : ids) {
    const auto found = table_less_.find(id);
    if (found != table_less_.end()) rows.emplace_back(id, &found->second);
  }
  if (rows.empty()) return;
  try {
    pg::ArrayLiteral xids, event_ids, types, aggregates, sequences, event_types, versions, payloads,
        headers, occurred;
    for (const auto& [id, row] : rows) {
      const Event& event = row->event;
      xids.add_plain(row->xid);
      event_ids.add(id);
      types.add(event.aggregate_type);
      aggregates.add(event.aggregate_id);
      sequences.add_plain(std::to_string(event.aggregate_sequence));
      event_types.add(event.event_type);
      versions.add_plain(std::to_string(event.schema_version));
      payloads.add(event.payload);
      headers.add(event.headers);
      // Untouched (spilled), it waits for the table path's horizon, which the stream's oldest
      // open transaction holds back; the producer's now() is its transaction's start, which may
      // be long before an earlier event of its aggregate committed (that one has no row, and is
      // perhaps still out): its commit time is after that one's, so it waits behind it.
      occurred.add(touched ? event.occurred_at : cdc::format_pg_timestamp(row->commit_time));
    }
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (pg::exec(table_.connection(), relay_sql::invisible_transactions(), {xids.text().c_str()})
               .int64(0, 0) > 0) {
      if (Clock::now() > deadline) {
        throw DatabaseError(
            "relay --source cdc: table-less events' transactions still not "
            "visible after 30 s (a synchronous standby that does not answer?)",
            "", true);
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
    const auto written =
        pg::exec(table_.connection(), relay_sql::materialize_table_less(options_.schema),
                 {event_ids.text().c_str(), types.text().c_str(), aggregates.text().c_str(),
                  sequences.text().c_str(), event_types.text().c_str(), versions.text().c_str(),
                  payloads.text().c_str(), headers.text().c_str(), occurred.text().c_str(),
                  touched ? "true" : "false"});
    if (written.rows() != static_cast<int>(rows.size())) {
      // Not written: its id is there already (written before a restart: fine), or another
      // pending event of its aggregate holds its sequence (rows written by hand?): say so.
      const auto clash =
          pg::exec(table_.connection(), relay_sql::materialize_clashes(options_.schema),
                   {event_ids.text().c_str()});
      for (int row = 0; row < clash.rows(); ++row) {
        log().error(
            "relay {}: table-less event {} was not written to the table: another pending "
            "event of its aggregate holds its sequence; it is not published",
            options_.relay_id, clash.text(row, 0));
      }
    }
  } catch (...) {
    // The book is done with these events: the slot's position must not move past them before a
    // restarted stream brings them again.
    hold_position_ = true;
    throw;
  }
  for (const auto& [id, row] : rows) table_less_.erase(id);
  RelayCounters::add(counters_.materialized, rows.size());
  log().debug("relay {}: wrote {} table-less event(s) to the table", options_.relay_id,
              rows.size());
}

}  // namespace outbox::detail
