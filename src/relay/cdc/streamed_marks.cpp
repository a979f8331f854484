#include "relay/cdc/streamed_marks.hpp"

#include <unordered_set>

#include "common/fault.hpp"
#include "pg/array_literal.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

StreamedMarks::StreamedMarks(const RelayOptions& options, RelayCounters& counters)
    : options_(options), counters_(counters), sql_(relay_sql::mark_published(options.schema)) {}

void StreamedMarks::add(std::vector<Outcome>& outcomes) {
  for (Outcome& outcome : outcomes) queued_.push_back(std::move(outcome));
  outcomes.clear();
  if (out_.empty()) send_queued();
}

void StreamedMarks::send_queued() {
  if (queued_.empty()) return;
  OUTBOX_FAULT(fault::kRelayAfterAckBeforeMark);
  try {
    if (!connection_) {
      connection_.emplace(
          relay_sql::open_relay_session(options_.database_url, options_.durable_marks));
    }
    pg::ArrayLiteral ids, tokens;
    for (const Outcome& outcome : queued_) {
      ids.add(outcome.event_id);
      tokens.add_null();  // streamed rows are claimed by no one
    }
    // $3-$6: no successors are claimed for streamed rows (the stream brings them).
    pg::send_prepared(connection_->get(), sql_,
                      {ids.text().c_str(), tokens.text().c_str(), "", "0", "false", "0"});
  } catch (const DatabaseError&) {
    drop_connection();
    throw;
  }
  out_ = std::move(queued_);
  queued_.clear();
  RelayCounters::add(counters_.mark_queries, 1);
}

void StreamedMarks::collect(bool wait, std::vector<EventId>& written,
                            std::vector<Outcome>& unwritten) {
  if (out_.empty()) {
    send_queued();
    return;
  }
  relay_sql::MarkRows rows;
  try {
    if (!wait && !pg::answer_arrived(connection_->get())) return;
    rows = relay_sql::read_mark_published(pg::take_answer(connection_->get(), sql_));
  } catch (const DatabaseError&) {
    drop_connection();
    throw;
  }
  OUTBOX_FAULT(fault::kRelayAfterMark);
  const std::unordered_set<std::string> marked(rows.marked.begin(), rows.marked.end());
  for (Outcome& outcome : out_) {
    if (marked.contains(outcome.event_id.to_string())) {
      counters_.by_type.add(outcome.type, TypedCounts::published);
      written.push_back(outcome.event_id);
    } else {
      unwritten.push_back(std::move(outcome));
    }
  }
  RelayCounters::add(counters_.published, rows.marked.size());
  out_.clear();
  send_queued();
}

int StreamedMarks::answer_socket() const {
  return out_.empty() || !connection_ ? -1 : PQsocket(connection_->get());
}

void StreamedMarks::drop_connection() {
  connection_.reset();
  for (Outcome& outcome : queued_) out_.push_back(std::move(outcome));
  queued_ = std::move(out_);
  out_.clear();
}

}  // namespace outbox::detail
