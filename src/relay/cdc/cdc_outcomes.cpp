// CdcSource and outcomes: the table path records those of claimed rows; streamed events (no
// claim token) are written here, on rows claimed by no one, and the book hears of them.
#include <unordered_set>

#include "common/log.hpp"
#include "relay/cdc/cdc_source.hpp"

namespace outbox::detail {

std::vector<SourcedEvent> CdcSource::record_published(std::vector<Outcome>& published,
                                                      bool take_successors,
                                                      std::uint64_t successor_bytes) {
  // Split without copying the streamed ones (at catch-up, all of them) into a new vector.
  std::vector<Outcome> claimed;
  for (Outcome& outcome : published) {
    if (outcome.origin != Origin::unclaimed) claimed.push_back(std::move(outcome));
  }
  std::erase_if(published,
                [](const Outcome& outcome) { return outcome.origin != Origin::unclaimed; });
  std::vector<Outcome> streamed = std::move(published);
  published.clear();
  for (Outcome& outcome : retry_published_) streamed.push_back(std::move(outcome));
  retry_published_.clear();
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
    (outcome.origin == Origin::unclaimed ? streamed : claimed).push_back(std::move(outcome));
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

void CdcSource::retry_unwritten() {
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
}

// Writes streamed outcomes; the book hears of those written. A row not there to write is most
// often one whose transaction other sessions do not see committed yet (decoded a moment before
// it leaves the proc array): it is tried again at the next turn. One still not there after
// kUnwrittenGiveUp belongs to another claim (a straggler claim, an operator's skip): counted as
// fenced, as in polling.
//
// Published outcomes are marked on their own session (StreamedMarks) while the loop goes on; the
// book hears of them when the answer comes (collect_marks), so an aggregate's next event and the
// confirmed position wait for the mark as before. Failed ones (rare) are written here at once.
void CdcSource::write_streamed(std::vector<Outcome>& outcomes, bool failed) {
  if (outcomes.empty()) return;
  if (!session_.table_less.empty()) {
    settle_table_less(outcomes, failed);
    if (outcomes.empty()) return;
  }
  if (!failed) {
    marks_.add(outcomes);
    collect_marks(milliseconds(0));
    return;
  }
  std::vector<EventId> ids;
  for (const Outcome& outcome : outcomes) ids.push_back(outcome.event_id);
  std::vector<Outcome> unwritten;
  table_.record_unclaimed_failed(outcomes, unwritten);
  std::unordered_set<EventId, cdc::StreamBook::IdHash> missing;
  for (const Outcome& outcome : unwritten) missing.insert(outcome.event_id);
  std::erase_if(ids, [&](const EventId& id) { return missing.contains(id); });
  settle_written(ids, unwritten, true);
}

void CdcSource::write_marks() {
  while (marks_.pending()) collect_marks(std::nullopt);
}

void CdcSource::collect_marks(std::optional<milliseconds> wait, int wake_fd) {
  std::vector<EventId> written;
  std::vector<Outcome> unwritten;
  try {
    marks_.collect(wait, written, unwritten, wake_fd);
  } catch (...) {
    // One lane's answer taken, then another lane (or the next send) failed: what was written is
    // written, whatever the reconnect does next.
    if (!written.empty() || !unwritten.empty()) settle_written(written, unwritten, false);
    throw;
  }
  if (!written.empty() || !unwritten.empty()) settle_written(written, unwritten, false);
}

void CdcSource::settle_written(const std::vector<EventId>& written, std::vector<Outcome>& unwritten,
                               bool failed) {
  for (const EventId& id : written) streamed_done(id, failed);
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
    // Someone else completes it: its successor may be theirs already, so it is checked.
    streamed_done(outcome.event_id, failed, false);
  }
  if (failed) materialize_left(true);  // table-less events that waited behind a failed one
}

void CdcSource::streamed_done(const EventId& id, bool failed, bool ours) {
  unwritten_since_.erase(id);
  if (failed) {
    session_.book.failed(id);
  } else if (ours) {
    session_.book.published(id);
  } else {
    session_.book.published_by_another(id);
  }
}

// Table-less events: published, they are done (no row to mark); failed, they get their row
// first, and the failure is then recorded on it as on any streamed row.
void CdcSource::settle_table_less(std::vector<Outcome>& outcomes, bool failed) {
  std::vector<EventId> to_write;
  std::vector<Outcome> rows;
  for (Outcome& outcome : outcomes) {
    const auto found = session_.table_less.find(outcome.event_id);
    if (found == session_.table_less.end()) {
      rows.push_back(std::move(outcome));
      continue;
    }
    // Published, the book is done with it (published() says whether it was out).
    if (failed ? !session_.book.is_out(outcome.event_id)
               : !session_.book.published(outcome.event_id)) {
      // A send from before the stream restarted, of an event the new stream brought again
      // and this book has not sent yet: it sends it (the position never passed it). An
      // outcome of such a send that comes before the event is read again takes the row path
      // and finds no row: counted fenced after kUnwrittenGiveUp, and the book ignores it.
      continue;
    }
    if (failed) {
      to_write.push_back(outcome.event_id);
      rows.push_back(std::move(outcome));
    } else {
      session_.table_less.erase(found);
      RelayCounters::add(counters_.published, 1);
      counters_.by_type.add(outcome.type, TypedCounts::published);
    }
  }
  outcomes = std::move(rows);
  materialize(to_write, true);
}

}  // namespace outbox::detail
