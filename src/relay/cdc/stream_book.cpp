#include "relay/cdc/stream_book.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

namespace outbox::cdc {

std::size_t StreamBook::KeyHash::operator()(const KeyView& key) const {
  const std::size_t type = std::hash<std::string_view>{}(key.aggregate_type);
  return type ^ (std::hash<std::string_view>{}(key.aggregate_id) + 0x9e3779b97f4a7c15ULL +
                 (type << 6) + (type >> 2));
}

std::size_t StreamBook::IdHash::operator()(const EventId& id) const {
  // UUIDv7: the low bytes are random (or a counter), good enough to hash on.
  std::size_t hash = 0;
  for (std::size_t i = 8; i < 16; ++i) hash = (hash << 8) | id.bytes()[i];
  return hash;
}

void StreamBook::begin(std::uint32_t xid) {
  if (reading_) throw std::logic_error("StreamBook: Begin inside a transaction");
  reading_.emplace();
  reading_xid_ = xid;
  reading_ids_.clear();
  reading_bytes_ = 0;
  spilled_ = false;
}

void StreamBook::add(Event event, std::uint64_t bytes) {
  if (!reading_) throw std::logic_error("StreamBook: an insert outside a transaction");
  if (spilled_) return;
  reading_bytes_ += bytes;
  reading_ids_.insert(event.event_id);
  reading_->push_back({std::move(event), bytes, 0});
}

bool StreamBook::contains(const EventId& id) const {
  return events_.contains(id) || reading_ids_.contains(id);
}

void StreamBook::spill() {
  if (!reading_) throw std::logic_error("StreamBook: spill outside a transaction");
  left_to_table_ += reading_->size();
  for (const Waiting& waiting : *reading_) left_.push_back(waiting.event.event_id);
  reading_->clear();
  reading_->shrink_to_fit();  // a spilled transaction may have been large
  reading_ids_ = {};
  reading_bytes_ = 0;
  spilled_ = true;
}

void StreamBook::commit(Lsn end_lsn, PgTimestamp commit_time) {
  if (!reading_) throw std::logic_error("StreamBook: Commit outside a transaction");
  std::deque<Waiting> read = std::move(*reading_);
  reading_.reset();
  reading_ids_ = {};
  reading_bytes_ = 0;
  const std::uint64_t number = first_transaction_ + transactions_.size();
  transactions_.push_back({reading_xid_, end_lsn, read.size(), commit_time});
  last_commit_time_ = std::max(last_commit_time_, commit_time);
  for (Waiting& waiting : read) {
    waiting.transaction = number;
    place(std::move(waiting));
  }
  done_transactions();  // one without events is done at once
}

void StreamBook::keepalive(Lsn wal_end) {
  if (!reading_ && transactions_.empty() && wal_end > confirmed_) confirmed_ = wal_end;
}

void StreamBook::place(Waiting waiting) {
  const Event& event = waiting.event;
  const auto [entry, inserted] = events_.try_emplace(event.event_id);
  if (!inserted) {
    // An id read again while the first is not done (a row inserted, deleted and inserted again,
    // by hand): the same id is the same event, and the book counts events by id. This one is
    // dropped; the first one's mark finds the row by its id.
    --transactions_.back().open;  // the transaction being committed
    return;
  }
  auto found = aggregates_.find(KeyView{event.aggregate_type, event.aggregate_id});
  if (found == aggregates_.end()) {
    found = aggregates_.try_emplace(Key{event.aggregate_type, event.aggregate_id}).first;
    found->second.key = &found->first;
  }
  Aggregate& aggregate = found->second;
  unlink_idle(aggregate);  // something of it is open again
  entry->second = Open{waiting.transaction, &aggregate, event.aggregate_sequence};
  waiting.open = &entry->second;
  waiting_bytes_ += waiting.bytes;
  if (aggregate.busy) {
    aggregate.behind.push_back(std::move(waiting));
  } else {
    aggregate.busy = true;
    ready_.push_back(std::move(waiting));
  }
}

void StreamBook::forget_published() {
  for (auto& [key, aggregate] : aggregates_) {
    aggregate.published = 0;
    aggregate.forgotten = aggregate.busy;  // an event out: its outcome must not tell either
  }
}

StreamBook::Candidates StreamBook::next(std::size_t limit, std::uint64_t byte_room,
                                        bool holding_nothing) {
  if (!checking_.empty()) throw std::logic_error("StreamBook: next() before decide()");
  Candidates candidates;
  std::uint64_t taken = 0;
  while (!ready_.empty() && checking_.size() < limit) {
    Waiting& front = ready_.front();
    const bool alone = holding_nothing && checking_.empty();
    if (!alone && taken + front.bytes > byte_room) break;
    taken += front.bytes;
    const Aggregate& aggregate = *front.open->aggregate;
    const std::int64_t sequence = front.event.aggregate_sequence;
    candidates.needs_check.push_back(sequence > 1 && aggregate.published != sequence - 1);
    candidates.follows_own_send.push_back(sequence > 1 && aggregate.published == sequence - 1 &&
                                          aggregate.published_by_send);
    candidates.xids.push_back(transactions_.at(front.transaction - first_transaction_).xid);
    waiting_bytes_ -= front.bytes;
    checking_.push_back(std::move(front));
    ready_.pop_front();
  }
  candidates.events.reserve(checking_.size());  // checking_ no longer grows: pointers stay valid
  for (const Waiting& waiting : checking_) candidates.events.push_back(&waiting.event);
  return candidates;
}

std::vector<Event> StreamBook::decide(const std::vector<std::size_t>& blocked,
                                      const std::vector<std::size_t>& deferred,
                                      const std::vector<std::size_t>& finished) {
  std::vector<Event> go;
  std::size_t next_blocked = 0;
  std::size_t next_deferred = 0;
  std::size_t next_finished = 0;
  std::vector<EventId> already;  // finished: done once the loop is over
  std::vector<Waiting> checked = std::move(checking_);
  checking_.clear();
  std::vector<Waiting> back;  // deferred, in order
  for (std::size_t i = 0; i < checked.size(); ++i) {
    if (next_deferred < deferred.size() && deferred[next_deferred] == i) {
      ++next_deferred;
      back.push_back(std::move(checked[i]));
    } else if (next_finished < finished.size() && finished[next_finished] == i) {
      ++next_finished;
      already.push_back(checked[i].event.event_id);
    } else if (next_blocked < blocked.size() && blocked[next_blocked] == i) {
      ++next_blocked;
      const EventId id = checked[i].event.event_id;
      Aggregate& aggregate = *checked[i].open->aggregate;
      ++left_to_table_;
      left_.push_back(id);
      leave_behind_to_table(aggregate);
      done(id);
      became_idle(aggregate);
    } else {
      checked[i].open->out = true;
      go.push_back(std::move(checked[i].event));
    }
  }
  for (auto it = back.rbegin(); it != back.rend(); ++it) {
    waiting_bytes_ += it->bytes;
    ready_.push_front(std::move(*it));
  }
  for (const EventId& id : already) {  // done as if published: its next event a candidate
    events_.at(id).out = true;
    done_sent(id, false);
  }
  return go;
}

void StreamBook::undo_next() {
  for (auto it = checking_.rbegin(); it != checking_.rend(); ++it) {
    waiting_bytes_ += it->bytes;
    ready_.push_front(std::move(*it));
  }
  checking_.clear();
}

bool StreamBook::is_out(const EventId& id) const {
  const auto found = events_.find(id);
  return found != events_.end() && found->second.out;
}

bool StreamBook::done_sent(const EventId& id, bool sent) {
  const auto found = events_.find(id);
  // Not the stream's (the table path's), already done, or not sent by this book.
  if (found == events_.end() || !found->second.out) return false;
  Aggregate& aggregate = *found->second.aggregate;
  aggregate.published = aggregate.forgotten ? 0 : found->second.sequence;
  aggregate.forgotten = false;
  // Found finished, it was published by someone else (a run before a restart): so may its
  // successor have been, and the check must ask about it.
  aggregate.published_by_send = sent;
  done(found);
  if (!aggregate.behind.empty()) {  // still busy: its next event is a candidate, unchecked
    ready_.push_back(std::move(aggregate.behind.front()));
    aggregate.behind.pop_front();
  } else {
    aggregate.busy = false;
    became_idle(aggregate);
  }
  return true;
}

void StreamBook::failed(const EventId& id) {
  const auto found = events_.find(id);
  if (found == events_.end() || !found->second.out) return;
  Aggregate& aggregate = *found->second.aggregate;
  leave_behind_to_table(aggregate);
  done(id);
  became_idle(aggregate);
}

// Everything waiting behind the aggregate's event that went to the table goes there too: it must
// not overtake it. The aggregate is then idle until the stream brings it again (the check then
// finds the table's rows pending and leaves that one as well, until the table path is through).
void StreamBook::leave_behind_to_table(Aggregate& aggregate) {
  while (!aggregate.behind.empty()) {
    const Waiting& waiting = aggregate.behind.front();
    waiting_bytes_ -= waiting.bytes;
    ++left_to_table_;
    const EventId id = waiting.event.event_id;
    left_.push_back(id);
    aggregate.behind.pop_front();
    done(id);
  }
  aggregate.busy = false;
  aggregate.published = 0;
}

// Idle aggregates are kept (their `published` spares the next event a check) up to kIdleKept;
// then those idle longest are forgotten.
void StreamBook::became_idle(Aggregate& aggregate) {
  unlink_idle(aggregate);
  aggregate.idle = true;
  aggregate.idle_prev = idle_.last;
  aggregate.idle_next = nullptr;
  (idle_.last != nullptr ? idle_.last->idle_next : idle_.first) = &aggregate;
  idle_.last = &aggregate;
  ++idle_.count;
  while (idle_.count > kIdleKept) {
    Aggregate& oldest = *idle_.first;
    unlink_idle(oldest);
    aggregates_.erase(aggregates_.find(*oldest.key));  // nothing open points to an idle one
  }
}

void StreamBook::unlink_idle(Aggregate& aggregate) {
  if (!aggregate.idle) return;
  (aggregate.idle_prev != nullptr ? aggregate.idle_prev->idle_next : idle_.first) =
      aggregate.idle_next;
  (aggregate.idle_next != nullptr ? aggregate.idle_next->idle_prev : idle_.last) =
      aggregate.idle_prev;
  aggregate.idle = false;
  aggregate.idle_prev = aggregate.idle_next = nullptr;
  --idle_.count;
}

void StreamBook::done(const EventId& id) {
  const auto found = events_.find(id);
  if (found != events_.end()) done(found);
}

void StreamBook::done(OpenEvents::iterator found) {
  const std::uint64_t transaction = found->second.transaction;
  events_.erase(found);
  Transaction& entry = transactions_.at(transaction - first_transaction_);
  --entry.open;
  done_transactions();
}

void StreamBook::done_transactions() {
  while (!transactions_.empty() && transactions_.front().open == 0) {
    confirmed_ = std::max(confirmed_, transactions_.front().end_lsn);
    transactions_.pop_front();
    ++first_transaction_;
  }
}

}  // namespace outbox::cdc
