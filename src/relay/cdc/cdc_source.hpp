#pragma once
// The change-data-capture relay's source and recorder (relay/event_source.hpp): events come from
// a logical replication slot (the stream path), and a PollingSource (the table path) publishes
// what the stream does not bring; "published" is the table's published_at for both
// (docs/ARCHITECTURE.md, "Change data capture").
//
// The stream path: ReplicationStream reads pgoutput messages; outbox_rows turns inserts into
// events; StreamBook keeps per-aggregate order and the confirmable position; before the first
// event of an aggregate with nothing out, relay_sql::check_streamed asks whether a lower sequence
// is still pending, and such events are left to the table path; no event goes before its row is
// visible to other sessions (the stream can bring a transaction a moment before, and under
// synchronous replication until the standby confirmed it). Streamed events carry no claim
// token: their marks and failure records match rows claimed by no one.
//
// The table path: the polling claim, restricted to rows the stream will not bring (touched rows,
// and untouched rows older than the horizon: the stream's certain position less
// CdcOptions::horizon_grace), every CdcOptions::table_poll, with successors as in polling.
//
// The confirmed position (standby status) moves only past transactions whose events are all
// marked, recorded as failed or left to the table: a crash re-streams the rest.
//
// The WAL budget: every second the source looks at how much WAL the slot holds back (and how far
// it lags, in bytes and age: RelayStats). Past CdcOptions::wal_budget it lets the slot go: stops
// streaming, drops the slot, and publishes from the table as the polling relay does (claiming
// every pending row once no streamed event is in flight any more: before that, only what its
// horizon allowed, so a streamed event still out is not sent a second time). Once the table path
// has caught up, and at least horizon_grace later, it streams again from a new slot; rows committed
// meanwhile are older than the new stream's horizon and go through the table path.
//
// Table-less events (CdcOptions::table_less): a producer's transactional message carries its
// events and transaction id; they go through the same book and check as streamed rows (visible
// once their transaction is). Published, they are done in memory: there is no row to mark. One
// the book leaves to the table, or whose send failed, is written to the table as a touched
// pending row (durably, before the position may move past it), and goes on from there as a row.
// Until a write that failed is behind a restarted stream, no position is reported.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cdc/replication_stream.hpp"
#include "outbox/relay.hpp"
#include "relay/cdc/outbox_rows.hpp"
#include "relay/cdc/sequence_witness.hpp"
#include "relay/cdc/stream_book.hpp"
#include "relay/event_source.hpp"
#include "relay/polling_source.hpp"
#include "relay/relay_counters.hpp"

namespace outbox::detail {

// The shard count a slot name says after its base name: "" is 1 shard, "_<i>_of_<n>" exactly as
// shard_slot_name writes it is n; anything else is not a sharding of that base (nullopt).
std::optional<unsigned> sharding_of(std::string_view rest);

class CdcSource final : public RelaySourceBase {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  // Connects both sessions, creates the publication and the slot if missing, and starts
  // streaming at the slot's confirmed position. Throws DatabaseError (retryable while PostgreSQL
  // is away), ConfigError for what needs an operator (no REPLICATION, wal_level, a publication
  // it may not create).
  CdcSource(const RelayOptions& options, RelayCounters& counters);
  ~CdcSource() override;

  Fetched fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) override;
  bool wait_for_news(milliseconds timeout) override;
  bool run_duties(Clock::time_point now, const SendWindow& window) override;
  [[nodiscard]] Clock::time_point next_duty() const override;
  void set_listening(bool listening) override;
  [[nodiscard]] bool listening() const override { return listening_; }
  bool reconnect(SendWindow& window) override;
  void leave() noexcept override;

  std::vector<SourcedEvent> record_published(std::vector<Outcome>& published, bool take_successors,
                                             std::uint64_t successor_bytes) override;
  void record_failed(std::vector<Outcome>& failed) override;

 private:
  void ensure_publications();
  void drop_other_shardings();
  static constexpr std::chrono::seconds kShardingSweepEvery{60};
  Clock::time_point next_sharding_sweep_;
  void start_stream();
  bool try_start_stream();
  void wait_as_standby();
  void prepare_slot();
  // Reads what has arrived (waiting at most `timeout` for the first message), up to the budget;
  // true when a message came.
  bool read_stream(milliseconds timeout);
  void take(const cdc::StreamMessage& message);
  void take_change(std::string_view payload);
  // The book's candidates, checked against the table: the events to send.
  std::vector<Event> stream_candidates(std::size_t limit, std::uint64_t byte_room,
                                       bool holding_nothing);
  [[nodiscard]] std::string horizon() const;
  void send_status(bool ask_reply);
  void write_streamed(std::vector<Outcome>& outcomes, bool failed);
  bool probe_caught_up();
  // Measures the slot's lag into the counters; true when it holds more WAL than the budget.
  bool look_at_slot();
  // Over the budget: stops streaming and lets the slot go; the table path publishes meanwhile.
  void release_slot(std::int64_t retained);
  // While not streaming: drops a released slot once our walsender let go of it, claims every
  // pending row once no streamed event is in flight (released) or touched rows only (another
  // relay streams), streams again when it may. True when rows became claimable.
  bool fallback_duties(Clock::time_point now, const SendWindow& window);
  void drop_released_slot();
  // Table-less events: the registration of the slot (or the refusal of a registered one), the
  // events of one message, and the writing of those the book left to the table.
  void check_table_less_registration();
  void take_table_less(const cdc::LogicalMessage& message);
  // A relay without --table-less met a table-less message: throws ConfigError (holding the
  // position) when its slot has been registered for table-less events since it started.
  void check_still_unregistered();
  std::uint32_t registration_checked_xid_ = 0;
  // Logs and counts a message with the outbox prefix that is not published; never stops.
  void reject_message(const cdc::LogicalMessage& message, const std::string& why);
  // The publications the stream reads: the outbox table's, and for a table-less relay the
  // sequence counters' (the witness), unless the slot's WAL is older than that (see below).
  [[nodiscard]] std::vector<std::string> stream_publications() const;
  // A publication for `table` publishing `publish`, created (or the table added) when missing.
  void ensure_publication(const std::string& name, const std::string& table,
                          const std::string& publish, const std::string& filter);
  // The stream failed with "publication ... does not exist" although it exists now: the slot's
  // unread WAL predates it. Returns false when it is really missing.
  bool outlived_publication();
  void drop_outlived_slot();
  // `touched`: claimable by the table path at once (failed, or blocked by a pending lower
  // sequence); otherwise only past the horizon (a spilled transaction).
  void materialize(const std::vector<EventId>& ids, bool touched);
  void materialize_left(bool touched) { materialize(book_.take_left(), touched); }
  [[nodiscard]] bool polling() const { return fallback_since_.has_value(); }

  const RelayOptions& options_;
  RelayCounters& counters_;
  std::string slot_;         // the shard's
  std::string publication_;  // the shard's
  // Table-less: the sequence counters' publication (<publication>_seq) and what it shows.
  std::string witness_publication_;
  cdc::SequenceWitness witness_;
  // The slot's unread WAL predates the witness publication (a relay upgraded onto a table-less
  // slot): PostgreSQL 15 cannot decode changes from before a publication existed under its name,
  // so the stream reads the outbox publication alone, and table-less messages unproven, up to
  // this position (the server's WAL when that was found); then it starts again with the witness.
  cdc::Lsn unproven_until_ = 0;
  bool witness_due_ = false;  // reading stopped at unproven_until_; restart once all is confirmed
  bool witness_retried_ = false;  // unproven_until_ was witness_since once: next time, now
  bool drop_slot_first_ = false;  // the slot outlived its publication: made again (not table-less)
  PollingSource table_;           // the table path, and the session for marks and checks
  std::unique_ptr<cdc::ReplicationStream> stream_;
  cdc::StreamBook book_;
  std::optional<cdc::OutboxColumns> columns_;
  std::uint32_t table_oid_ = 0;  // outbox_events now: a dropped one's WAL is not ours
  const std::string check_sql_;
  bool listening_ = false;
  bool table_due_ = true;
  bool deferred_ = false;  // the last look found rows not visible yet
  Clock::time_point next_table_poll_;
  cdc::Lsn confirmed_sent_ = 0;
  // The furthest position this relay confirmed, and on which server and timeline: everything
  // before it is done (published, or in the table), whatever the slot says after a crash.
  struct Done {
    std::string system_id;
    std::uint32_t timeline = 0;
    cdc::Lsn lsn = 0;
  } done_;
  // The stream had received all WAL flushed at this server time (a probe while nothing was
  // open): with nothing open, the horizon follows it rather than the last commit read.
  cdc::PgTimestamp caught_up_time_ = 0;
  std::optional<std::pair<cdc::PgTimestamp, cdc::Lsn>> probe_;  // (server time, flush lsn)
  // Streamed outcomes whose rows were not there to write, tried again each turn.
  static constexpr std::chrono::seconds kUnwrittenGiveUp{2};
  std::vector<Outcome> retry_published_, retry_failed_;
  std::unordered_map<EventId, Clock::time_point, cdc::StreamBook::IdHash> unwritten_since_;
  // The WAL budget (see the top of this file).
  static constexpr std::chrono::seconds kSlotLookEvery{1};
  Clock::time_point next_slot_look_;
  std::optional<Clock::time_point> fallback_since_;  // not streaming since (let go, or standby)
  bool released_ = false;    // not streaming because this relay let the slot go over the budget
  bool slot_taken_ = false;  // not streaming: another relay streams the slot
  Clock::time_point next_stream_try_;
  std::string fallback_horizon_;  // the table path's horizon while streamed events are out
  bool streamed_out_ = false;     // polling: streamed events may still be in flight
  bool table_caught_up_ = false;  // polling: the last claim found every ready row
  int released_walsender_ = 0;    // the walsender that held the slot we let go, until dropped
  // Table-less events read and not done, with their transaction ids.
  struct TableLess {
    Event event;
    std::string xid;
    cdc::PgTimestamp commit_time = 0;  // its transaction's
  };
  std::unordered_map<EventId, TableLess, cdc::StreamBook::IdHash> table_less_;
  const std::string message_prefix_;
  const std::string replay_prefix_;
  bool registered_before_ = true;  // the slot was registered for table-less events before us
  bool hold_position_ = false;     // a table-less write failed: report no position until restart
  std::uint32_t reading_xid_ = 0;  // Begin's xid of the transaction being read
  cdc::PgTimestamp reading_commit_time_ = 0;  // and its commit time
  // Where a stream starts (see the function); a table-less relay's saved position.
  cdc::Lsn start_position();
  void save_position(cdc::Lsn confirmed);
  cdc::Lsn saved_position_ = 0;
  Clock::time_point next_position_save_;
};

}  // namespace outbox::detail
