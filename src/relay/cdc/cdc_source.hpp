#pragma once
// The change-data-capture relay's source and recorder (relay/event_source.hpp): events come from
// a logical replication slot (the stream path), and a PollingSource (the table path) publishes
// what the stream does not bring; "published" is the table's published_at for both
// (docs/ARCHITECTURE.md, "Change data capture").
//
// The stream path: ReplicationStream reads pgoutput messages; outbox_rows turns inserts into
// events; StreamBook keeps per-aggregate order and the confirmable position; before the first
// event of an aggregate with nothing out, cdc_sql::check_streamed asks whether a lower sequence
// is still pending, and such events are left to the table path; no event goes before its row is
// visible to other sessions (the stream can bring a transaction a moment before, and under
// synchronous replication until the standby confirmed it). Streamed events carry no claim
// token: their marks and failure records match rows claimed by no one.
//
// The table path: the polling claim, restricted to rows the stream will not bring (touched rows,
// and untouched rows older than the horizon: the stream's certain position less
// CdcOptions::horizon_grace), every CdcOptions::table_poll (less often after a sweep that took
// nothing: TableSweep), with successors as in polling.
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
// once their transaction is), and skip it after their stream's own send on terms of their own
// (CdcSource::asked_about: while the table holds no row at all). Published, they are
// done in memory: there is no row to mark. One the book leaves to the table, or whose send failed,
// is written to the table as a touched pending row (durably, before the position may move past it),
// and goes on from there as a row. Until a write that failed is behind a restarted stream, no
// position is reported.

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox/relay.hpp"
#include "pg/array_literal.hpp"
#include "relay/cdc/cdc_sql.hpp"
#include "relay/cdc/publications.hpp"
#include "relay/cdc/resume_position.hpp"
#include "relay/cdc/slot_mode.hpp"
#include "relay/cdc/stream_session.hpp"
#include "relay/cdc/streamed_marks.hpp"
#include "relay/event_source.hpp"
#include "relay/polling_source.hpp"
#include "relay/relay_counters.hpp"

namespace outbox::detail {

// The source's parts, one job each (docs/ARCHITECTURE.md, "Change data capture"):
//   Publications      publication set-up, and a slot older than its publication (publications.cpp)
//   StreamSession     one stream's state, built and dropped whole (stream_session.hpp)
//   slot_mode         streaming / standby / released, pure transitions (slot_mode.hpp)
//   ResumePosition    where a stream starts (resume_position.hpp)
//   parse_table_less_message  the table-less message format (table_less_message.hpp)
//   cdc_sql, cdc::slot_admin  every statement
// and CdcSource's own functions, by job: the façade the loop drives (cdc_source.cpp), the stream
// (cdc_stream.cpp), the slot's upkeep and the modes (cdc_slot.cpp), table-less events
// (cdc_table_less.cpp), and the outcomes of streamed events (cdc_outcomes.cpp).
class CdcSource final : public RelaySourceBase {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  // Connects both sessions, creates the publication and the slot if missing, and starts
  // streaming at the slot's confirmed position. Throws DatabaseError (retryable while PostgreSQL
  // is away), ConfigError for what needs an operator (no REPLICATION, wal_level, a publication
  // it may not create).
  CdcSource(const RelayOptions& options, RelayCounters& counters,
            const HealthBoard* health = nullptr);
  ~CdcSource() override;

  Fetched fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) override;
  bool wait_for_news(milliseconds timeout) override;
  [[nodiscard]] bool news_may_wait() const override { return live_news_; }
  [[nodiscard]] NewsSockets news_sockets() const override;
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
  // --- the façade (cdc_source.cpp) ---
  // The book's candidates, checked against the table: the events to send.
  std::vector<Event> stream_candidates(std::size_t limit, std::uint64_t byte_room,
                                       bool holding_nothing);
  std::vector<std::size_t> asked_about(const cdc::StreamBook::Candidates& candidates);
  cdc_sql::StreamCheck check_candidates(const cdc::StreamBook::Candidates& candidates,
                                        const std::vector<std::size_t>& asked);
  Fetched fetch_polling(std::size_t limit, std::uint64_t byte_room, bool holding_nothing);
  // Streams, or waits as a standby when another relay streams the slot.
  void stream_or_stand_by();
  void retry_unwritten();
  [[nodiscard]] bool polling() const { return slot_mode::polling(mode_); }

  // --- the stream (cdc_stream.cpp) ---
  // The one place a stream's state is dropped: an empty session (no stream) replaces it.
  void reset_session();
  void start_stream();
  void note_table_rows();
  bool try_start_stream();
  void prepare_slot();
  void drop_outlived_slot();
  [[nodiscard]] cdc::Lsn start_position();
  void save_position(cdc::Lsn confirmed);
  // Reads what has arrived (waiting at most `timeout` for the first message), up to the budget;
  // true when a message came. `live`: it came, fewer than kLive messages, and the read ended for
  // want of more (not at the budget or a full book).
  bool read_stream(milliseconds timeout, bool* live = nullptr);
  // The book holds as much as the loop can use: read_stream() leaves the rest with the server.
  [[nodiscard]] bool stream_full() const;
  // The stream's socket while read_stream() would read it (news for fetch()); -1 otherwise.
  [[nodiscard]] int stream_news_socket() const;
  void take(const cdc::StreamMessage& message);
  // `sent`: the server's clock when it sent the message (XLogData).
  void take_change(std::string_view payload, cdc::PgTimestamp sent);
  void take_message(const cdc::LogicalMessage& message);
  void take_relation(const cdc::Relation& relation);
  void take_insert(const cdc::Insert& insert);
  [[nodiscard]] std::int64_t certain_position() const;
  [[nodiscard]] ClaimHorizon horizon() const;
  bool probe_caught_up();
  void send_status(bool ask_reply);
  // Restarts the stream once the WAL older than the witness publication is done.
  void restart_with_witness();

  // --- the slot: its upkeep and the modes (cdc_slot.cpp) ---
  void drop_other_shardings();
  static constexpr std::chrono::seconds kShardingSweepEvery{60};
  // Measures the slot's lag into the counters; true when it holds more WAL than the budget.
  bool look_at_slot();
  // Another relay streams the slot: waits as its standby.
  void wait_as_standby();
  // Over the budget: stops streaming and lets the slot go; the table path publishes meanwhile.
  void release_slot(std::int64_t retained);
  void drop_released_slot();
  // While not streaming: drops a released slot once our walsender let go of it, claims every
  // pending row once no streamed event is in flight (released) or touched rows only (another
  // relay streams), streams again when it may. True when rows became claimable.
  bool fallback_duties(Clock::time_point now, const SendWindow& window);
  [[nodiscard]] bool any_streamed_out(const SendWindow& window) const;
  bool try_stream_again(Clock::time_point now);
  // The mode's flags into the counters.
  void show_mode();

  // --- table-less events (cdc_table_less.cpp) ---
  // The registration of the slot (or the refusal of a registered one).
  void check_table_less_registration();
  void take_table_less(const cdc::LogicalMessage& message);
  // Why the message cannot be a producer's before it is parsed; "" when it may be.
  [[nodiscard]] std::string refuse_unparsed(const cdc::LogicalMessage& message) const;
  void admit_table_less(std::vector<Event>& events, const std::string& xid);
  // A relay without --table-less met a table-less message: throws ConfigError (holding the
  // position) when its slot has been registered for table-less events since it started.
  void check_still_unregistered();
  // Logs and counts a message with the outbox prefix that is not published; never stops.
  void reject_message(const cdc::LogicalMessage& message, const std::string& why);
  // Writes the table-less events among `ids` to the table. `touched`: claimable by the table
  // path at once (failed, or blocked by a pending lower sequence); otherwise only past the
  // horizon (a spilled transaction).
  void materialize(const std::vector<EventId>& ids, bool touched);
  // A table-less stream's position moved past what it confirmed (kTableLessConfirmEvery).
  [[nodiscard]] bool confirm_due() const {
    return options_.cdc.table_less && session_.book.confirmable() > session_.confirmed_sent;
  }
  void materialize_left(bool touched) { materialize(session_.book.take_left(), touched); }
  void wait_visible(pg::ArrayLiteral& xids);
  void report_clashes(pg::ArrayLiteral& event_ids);

  // --- outcomes of streamed events (cdc_outcomes.cpp) ---
  // Published ones go to marks_ (written while the loop goes on), failed ones are written here.
  void write_streamed(std::vector<Outcome>& outcomes, bool failed);
  // Takes the marks' answers (StreamedMarks::collect: waits at most `wait`, none: no limit).
  void collect_marks(std::optional<milliseconds> wait, int wake_fd = -1);
  // The book hears of the outcomes written; those whose rows were not there are tried again, or
  // counted fenced after kUnwrittenGiveUp.
  void settle_written(const std::vector<EventId>& written, std::vector<Outcome>& unwritten,
                      bool failed);
  // Table-less outcomes: published, done; failed, written to the table first. The rest stay.
  void settle_table_less(std::vector<Outcome>& outcomes, bool failed);
  // `ours`: written by this relay's mark (not fenced: someone else completes the row).
  void streamed_done(const EventId& id, bool failed, bool ours = true);
  // Waits until every mark is written (before a stream starts again: what it brings again is
  // then found finished, not sent twice).
  void write_marks();

  const RelayOptions& options_;
  RelayCounters& counters_;
  Publications publications_;
  PollingSource table_;  // the table path, and the session for checks and failure records
  StreamedMarks marks_;  // the marks of streamed events, on sessions of their own
  cdc_sql::VisibleXmin visible_xmin_;  // transactions every new snapshot sees ended
  const std::string check_sql_;
  const std::string message_prefix_;
  const std::string replay_prefix_;
  StreamSession session_;
  slot_mode::SlotMode mode_;
  ResumePosition resume_;
  bool listening_ = false;
  // wait_for_news()'s last news was a live read (read_stream), with fewer than kLive events open in
  // the book, and the last transaction begun sent within StreamSession::kLiveLag of its commit:
  // live traffic, not a catch-up (a paced wait leaves the stream unread, and a walsender that is
  // behind would block on its full socket meanwhile). A read of keepalives alone keeps the last
  // transaction's verdict.
  static constexpr std::size_t kLive = 256;
  bool live_news_ = false;
  bool table_due_ = true;
  Clock::time_point next_table_poll_;
  // Table-less: how often a position that moved is confirmed (and saved, ResumePosition), since
  // every event between the slot's position and what was done is published again by the next
  // stream (another relay's, or after a restart): there is no row to find it done by.
  static constexpr std::chrono::milliseconds kTableLessConfirmEvery{100};
  Clock::time_point next_confirm_;
  Clock::time_point next_sharding_sweep_;
  // The WAL budget (see the top of this file).
  static constexpr std::chrono::seconds kSlotLookEvery{1};
  Clock::time_point next_slot_look_;
  Clock::time_point next_stream_try_;
  // Streamed outcomes whose rows were not there to write, tried again each turn.
  static constexpr std::chrono::seconds kUnwrittenGiveUp{2};
  std::vector<Outcome> retry_published_, retry_failed_;
  std::unordered_map<EventId, Clock::time_point, cdc::StreamBook::IdHash> unwritten_since_;
  // Table-less: whether the slot was registered before this relay; the transaction whose
  // registration a relay without --table-less looked up last (once per transaction).
  bool registered_before_ = true;
  std::uint32_t registration_checked_xid_ = 0;
};

}  // namespace outbox::detail
