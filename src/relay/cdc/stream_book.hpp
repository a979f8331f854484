#pragma once
// The change-data-capture relay's books over its stream, without I/O (tests/unit/stream_book_test):
// which streamed events may go out now, which wait behind an earlier event of their aggregate,
// which are left to the table path, and how far the slot's confirmed position may move.
//
// Per-aggregate order (docs/ARCHITECTURE.md, "Change data capture"): the stream brings an
// aggregate's events in sequence order; at most one of them is out (handed to the loop, or being
// checked) at a time, the next waits here. The first event of an aggregate with nothing out is a
// candidate: unless its sequence is 1 or the book itself saw its predecessor published, the source
// asks the table whether a lower sequence is still pending (cdc_sql::check_streamed) and tells
// the book (decide). Every candidate's row must also be visible to other sessions before it goes
// (a transaction is streamed a moment before it is seen committed): one that is not waits. An event
// with a lower one pending is left to the table, and so is every event of its aggregate that waits
// here; a failed event likewise.
//
// The confirmed position: a transaction is done when each of its events is published, failed
// (recorded in the table) or left to the table; the position moves to the end of the last
// transaction that is done with every one before it.
//
// Not thread safe: the relay's thread owns it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cdc/pgoutput.hpp"
#include "outbox/event.hpp"

namespace outbox::cdc {

class StreamBook {
 public:
  struct IdHash {
    std::size_t operator()(const EventId& id) const;
  };

  StreamBook() = default;
  // Its entries point at each other (map nodes stay put when the book moves): moved, not copied;
  // a moved-from book is only to be destroyed.
  StreamBook(StreamBook&&) = default;
  StreamBook& operator=(StreamBook&&) = default;
  StreamBook(const StreamBook&) = delete;
  StreamBook& operator=(const StreamBook&) = delete;

  // Candidates for sending, in stream order, from next(): the book's own events (not copies),
  // valid until decide() or undo_next().
  struct Candidates {
    std::vector<const Event*> events;
    std::vector<bool> needs_check;  // ask the table whether a lower sequence is pending
    // Its predecessor went out through this book and was marked by its send (not found finished,
    // not left to the table): nothing about its row needs asking but whether its transaction is
    // visible, which the source may know without a statement (the transaction ids below).
    std::vector<bool> follows_own_send;
    std::vector<std::uint32_t> xids;  // each one's transaction id (Begin's; 0 when unknown)
  };

  // --- reading the stream ---
  // A transaction begins (`xid`: its id from Begin); add() its outbox inserts, then commit().
  void begin(std::uint32_t xid = 0);
  void add(Event event, std::uint64_t bytes);
  // The transaction being read is too large to hold: its events read so far are dropped and
  // later ones ignored; they stay pending in the table, whose path publishes them (rows older
  // than the stream's position), and later events of their aggregates wait behind them there.
  void spill();
  // Whether an event with this id was read and is not done (also in the transaction being read).
  [[nodiscard]] bool contains(const EventId& id) const;
  // Bytes of the transaction being read (0 once spilled).
  [[nodiscard]] std::uint64_t reading_bytes() const { return reading_bytes_; }
  [[nodiscard]] bool spilled() const { return spilled_; }
  // The transaction ends at `end_lsn` (Commit's end_lsn): its events become candidates or wait
  // behind their aggregate's event that is out. A transaction without events is done at once.
  void commit(Lsn end_lsn, PgTimestamp commit_time = 0);
  // The server's WAL end from a keepalive: with nothing read and not done, the confirmed position
  // may move there (traffic that publishes nothing then holds no WAL).
  void keepalive(Lsn wal_end);

  // --- handing out ---
  // Up to `limit` candidates whose bytes fit `byte_room` (the first always goes when
  // `holding_nothing`); each is then out until decide().
  Candidates next(std::size_t limit, std::uint64_t byte_room, bool holding_nothing);
  // For the last next(): the positions whose aggregate has a lower sequence pending, or whose
  // row is the table path's (sorted): those, and what waits behind them, are left to the table;
  // the positions whose rows are not visible yet (sorted): those go back, first in line; the
  // positions whose rows are finished already (sorted): done as if published, not sent; the rest
  // are returned, to be sent.
  std::vector<Event> decide(const std::vector<std::size_t>& blocked,
                            const std::vector<std::size_t>& deferred = {},
                            const std::vector<std::size_t>& finished = {});
  // The check could not be made: the last next()'s candidates go back, first in line.
  void undo_next();
  // Whether next() would hand out anything.
  [[nodiscard]] bool has_candidates() const { return !ready_.empty(); }

  // --- outcomes of sent events ---
  // Only for events decide() returned: an outcome of any other id (a send from before the book
  // was made anew, whose event this book read again and has not sent) changes nothing.
  // Published: done; the next event of its aggregate becomes a candidate that needs no check.
  // Returns whether it was out (else nothing changed).
  bool published(const EventId& id) { return done_sent(id, true); }
  // Done, but completed by someone else (its mark was fenced): its successor is checked.
  void published_by_another(const EventId& id) { done_sent(id, false); }
  // Failed (recorded in the table with backoff or quarantine): done; what waits behind it is left
  // to the table, where it stays behind the failed one.
  void failed(const EventId& id);
  // Whether decide() returned this event and no outcome came yet.
  [[nodiscard]] bool is_out(const EventId& id) const;

  // --- positions and sizes ---
  // The commit time of the oldest transaction not done, or of the last one read when all are
  // done (0: none read): how far the stream has certainly come (the table path's horizon).
  [[nodiscard]] PgTimestamp position_time() const {
    return transactions_.empty() ? last_commit_time_ : transactions_.front().commit_time;
  }
  // Everything before this is done: what to confirm to the server (0: nothing yet).
  [[nodiscard]] Lsn confirmable() const { return confirmed_; }
  [[nodiscard]] bool in_transaction() const { return reading_.has_value(); }
  // Bytes of events read and not yet out: the source stops reading past its budget.
  [[nodiscard]] std::uint64_t waiting_bytes() const { return waiting_bytes_; }
  // Events read and not done (waiting, out or in flight).
  [[nodiscard]] std::size_t open_events() const { return events_.size(); }
  // Events left to the table so far (for counters and tests).
  [[nodiscard]] std::uint64_t left_to_table() const { return left_to_table_; }
  // The ids of the events left to the table since the last call (spilled, blocked, or waiting
  // behind a blocked or failed event), in the order they were left: an event that exists only in
  // the stream (a table-less one) must be written to the table before the position moves past it.
  [[nodiscard]] std::vector<EventId> take_left() { return std::exchange(left_, {}); }
  // A replay made published events pending again: from now on each aggregate's next event is
  // checked against the table (needs_check), whatever the book saw published.
  void forget_published();
  // Aggregates the book keeps (busy ones, and idle ones up to kIdleKept): its memory.
  [[nodiscard]] std::size_t tracked_aggregates() const { return aggregates_.size(); }
  static constexpr std::size_t kIdleKept = 65536;

 private:
  struct Key {
    std::string aggregate_type, aggregate_id;
    bool operator==(const Key&) const = default;
  };
  // A key's view, to look an aggregate up without copying an event's strings.
  struct KeyView {
    std::string_view aggregate_type, aggregate_id;
  };
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(const Key& key) const {
      return (*this)(KeyView{key.aggregate_type, key.aggregate_id});
    }
    std::size_t operator()(const KeyView& key) const;
  };
  struct KeyEqual {
    using is_transparent = void;
    bool operator()(const Key& a, const Key& b) const { return a == b; }
    bool operator()(const KeyView& a, const Key& b) const {
      return a.aggregate_type == b.aggregate_type && a.aggregate_id == b.aggregate_id;
    }
    bool operator()(const Key& a, const KeyView& b) const { return (*this)(b, a); }
  };
  struct Open;
  struct Waiting {
    Event event;
    std::uint64_t bytes = 0;
    std::uint64_t transaction = 0;
    Open* open = nullptr;  // its entry in events_, once committed (place)
  };
  struct Aggregate {
    bool busy = false;               // an event of it is a candidate, out or in flight
    std::deque<Waiting> behind;      // its events read after that one, in order
    std::int64_t published = 0;      // the sequence last published through the book (0: none)
    bool published_by_send = false;  // that one by this book's send, not found finished
    bool forgotten = false;          // a replay came while an event of it was out
    // Idle (nothing read and not done), it is in the book's idle list, oldest first.
    bool idle = false;
    Aggregate* idle_prev = nullptr;
    Aggregate* idle_next = nullptr;
    const Key* key = nullptr;  // its key in aggregates_ (node-stable)
  };
  struct Transaction {
    std::uint32_t xid = 0;
    Lsn end_lsn = 0;
    std::size_t open = 0;  // events not done
    PgTimestamp commit_time = 0;
  };
  // An event read and not done. Aggregates live in an unordered_map: pointers to them stay valid
  // until they are erased, and only idle ones (nothing open) are.
  struct Open {
    std::uint64_t transaction = 0;
    Aggregate* aggregate = nullptr;
    std::int64_t sequence = 0;
    bool out = false;  // returned by decide(), to be sent: its outcome may come
  };

  void place(Waiting waiting);
  // An event out is done: published by its send (`sent`), or found finished by the check.
  bool done_sent(const EventId& id, bool sent);
  void done(const EventId& id);
  using OpenEvents = std::unordered_map<EventId, Open, IdHash>;
  void done(OpenEvents::iterator found);
  void done_transactions();
  void leave_behind_to_table(Aggregate& aggregate);
  // The aggregate has nothing open: last in the idle list, and the oldest idle ones past
  // kIdleKept are forgotten.
  void became_idle(Aggregate& aggregate);
  void unlink_idle(Aggregate& aggregate);

  // The transaction being read: a deque, so a large one grows without moving what it holds.
  std::optional<std::deque<Waiting>> reading_;
  std::unordered_set<EventId, IdHash> reading_ids_;  // its events' ids
  std::uint64_t reading_bytes_ = 0;
  std::uint32_t reading_xid_ = 0;
  bool spilled_ = false;
  std::deque<Waiting> ready_;      // candidates not handed out yet, in order
  std::vector<Waiting> checking_;  // handed out by next(), until decide()
  std::unordered_map<Key, Aggregate, KeyHash, KeyEqual> aggregates_;
  // Read and not done. A node map: Waiting::open points into it until the event is done.
  OpenEvents events_;
  // The idle list: aggregates with nothing open, idle longest first. It points into aggregates_,
  // whose nodes move with the book: a moved-from book's list is empty.
  struct IdleList {
    Aggregate* first = nullptr;
    Aggregate* last = nullptr;
    std::size_t count = 0;
    IdleList() = default;
    IdleList(IdleList&& other) noexcept { *this = std::move(other); }
    IdleList& operator=(IdleList&& other) noexcept {
      first = std::exchange(other.first, nullptr);
      last = std::exchange(other.last, nullptr);
      count = std::exchange(other.count, 0);
      return *this;
    }
  };
  IdleList idle_;
  std::deque<Transaction> transactions_;  // not yet confirmable, oldest first
  std::uint64_t first_transaction_ = 0;   // the number of transactions_.front()
  Lsn confirmed_ = 0;
  PgTimestamp last_commit_time_ = 0;
  std::uint64_t waiting_bytes_ = 0;
  std::uint64_t left_to_table_ = 0;
  std::vector<EventId> left_;
};

}  // namespace outbox::cdc
