// CdcSource's façade: what the relay loop drives (relay/event_source.hpp), choosing between the
// stream and the table path by the slot's mode.
#include "relay/cdc/cdc_source.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "common/timestamp.hpp"
#include "pg/params.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

namespace {

// Whether a row's occurred_at (as the stream printed it) is at or after `pg_micros`
// (microseconds since 2000-01-01, cdc::PgTimestamp); false when it does not read.
bool occurred_since(std::string_view occurred_at, std::int64_t pg_micros) {
  constexpr std::int64_t kUnixToPgMicros = 946684800LL * 1000000;
  const auto at = parse_timestamptz(occurred_at);
  if (!at) return false;
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(at->time_since_epoch()).count();
  return micros - kUnixToPgMicros >= pg_micros;
}

}  // namespace

CdcSource::CdcSource(const RelayOptions& options, RelayCounters& counters,
                     const HealthBoard* health)
    : options_(options),
      counters_(counters),
      publications_(options),
      table_(options, counters,
             options.cdc.shards > 1
                 ? relay_sql::shard_condition("e.", options.cdc.shards, options.cdc.shard)
                 : std::string(),
             health),
      marks_(options, counters),
      check_sql_(cdc_sql::check_streamed(options.schema)),
      message_prefix_(options.schema.message_prefix()),
      replay_prefix_(options.schema.replay_message_prefix()),
      session_(options.cdc.table_poll) {
  publications_.ensure(table_.connection());
  check_table_less_registration();
  drop_other_shardings();
  stream_or_stand_by();
}

CdcSource::~CdcSource() = default;

void CdcSource::stream_or_stand_by() {
  if (try_start_stream()) {
    table_.set_listening(false);  // registered awake: producers never notify a streaming relay
  } else {
    wait_as_standby();
  }
}

Fetched CdcSource::fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) {
  collect_marks(milliseconds(0));  // what a mark wrote frees its aggregate's next event
  if (polling()) return fetch_polling(limit, byte_room, holding_nothing);
  read_stream(milliseconds(0));
  // Nothing to hand out and nothing at the broker, but marks not written: wait for an answer or
  // for the stream to bring more, until the stream's status is due. With candidates the loop sends
  // them while the server writes the marks; with events at the broker it waits for their reports
  // and these at once. A mark held up (a row lock) holds back only what waits for it.
  if (holding_nothing && !session_.book.has_candidates() && marks_.pending()) {
    collect_marks(session_.stream->until_status_due(), stream_news_socket());
    read_stream(milliseconds(0));
  }
  Fetched fetched;
  std::uint64_t used = 0;
  for (Event& event : stream_candidates(limit, byte_room, holding_nothing)) {
    used += event.payload.size() + event.headers.size();
    fetched.events.push_back({std::move(event), std::string(), Origin::unclaimed});
  }
  RelayCounters::add(counters_.claimed, fetched.events.size());
  if (table_due_ && fetched.events.size() < limit) {
    table_due_ = false;
    const ClaimHorizon claim_horizon = horizon();
    table_.set_claim_horizon(claim_horizon);
    const auto started = Clock::now();
    Fetched claimed =
        table_.fetch(limit - fetched.events.size(), byte_room > used ? byte_room - used : 0,
                     holding_nothing && fetched.events.empty());
    session_.sweep.ran({.started = started,
                        .ended = Clock::now(),
                        .took = claimed.events.size(),
                        .touched_only = claim_horizon == ClaimHorizon::touched_only(),
                        .last = claimed.reached_end});
    for (SourcedEvent& event : claimed.events) fetched.events.push_back(std::move(event));
    fetched.waiting_bytes = claimed.waiting_bytes;
    table_due_ = !claimed.reached_end;
  }
  // Rows not visible yet are looked at again at the next turn, not at once.
  fetched.reached_end = (!session_.book.has_candidates() || session_.deferred) && !table_due_;
  return fetched;
}

// Released over the budget: what the stream had out keeps its horizon until it is done, then
// every pending row. Waiting for a slot another relay streams: touched rows only.
Fetched CdcSource::fetch_polling(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) {
  table_.set_claim_horizon(slot_mode::table_horizon(mode_));
  Fetched claimed = table_.fetch(limit, byte_room, holding_nothing);
  slot_mode::table_claimed(mode_, claimed.reached_end, claimed.began_mid_way, claimed.events.size(),
                           limit);
  return claimed;
}

// The book's candidates, looked at in one statement: those whose rows other sessions do not see
// yet wait (asked again at the next fetch); those with a lower sequence of their aggregate
// pending are left to the table path; the rest go.
std::vector<Event> CdcSource::stream_candidates(std::size_t limit, std::uint64_t byte_room,
                                                bool holding_nothing) {
  const cdc::StreamBook::Candidates candidates =
      session_.book.next(limit, byte_room, holding_nothing);
  session_.deferred = false;
  if (candidates.events.empty()) return session_.book.decide({});
  cdc_sql::StreamCheck check;
  try {
    const std::vector<std::size_t> asked = asked_about(candidates);
    check = check_candidates(candidates, asked);
    RelayCounters::add(counters_.unchecked, candidates.events.size() - asked.size());
  } catch (...) {
    session_.book.undo_next();  // looked at again after the reconnect
    throw;
  }
  session_.deferred = !check.invisible.empty();
  for (const std::size_t finished : check.finished) {
    session_.table_less.erase(candidates.events[finished]->event_id);  // its row went out already
  }
  std::vector<Event> go = session_.book.decide(check.blocked, check.invisible, check.finished);
  materialize_left(true);
  return go;
}

// The candidates the check must ask about: all but rows whose predecessor this book sent and
// marked (not fenced, not found finished), that occurred after the table path's horizon, and
// whose transaction is known visible (it ended before the oldest transaction a recent snapshot
// saw running: every later snapshot sees it committed). About those there is nothing to ask: no
// lower sequence can be pending, the table path claims only touched rows and rows older than its
// horizon, and what finished or claimed them would have finished or claimed their predecessor
// first. What is left is what the check's own snapshot leaves too, only over a longer window: an
// operator's quarantine or skip, or a relay that let its slot go claiming every pending row,
// between the read and the send (a duplicate; the mark then finds the skip or the claim).
//
// A table-less event has no row of its own, but the table may hold one with its id: written by
// an earlier stream's relay (its send failed, and the slot's position had not moved past it: the
// row is the table path's, or skipped by an operator, or published), or by a caller that gave a
// row the same id. While the table held no row at all when this stream took the slot (its earlier
// readers gone) and the stream has brought no insert since, as in a table-less outbox, there is
// none: its transaction's visibility is all there is to ask. The horizon does not apply (the table
// path claims rows). A relay whose stream was lost but which still writes an event it read (a send
// that fails after its walsender went) can write one after this stream looked: it is then
// published twice, from here and from its row, as a restart's duplicates are (the check's own
// snapshot leaves that window too, shorter).
std::vector<std::size_t> CdcSource::asked_about(const cdc::StreamBook::Candidates& candidates) {
  std::vector<std::size_t> asked;
  bool refreshed = false;
  const auto now = Clock::now();
  const std::int64_t certain = certain_position();
  const auto grace =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.cdc.horizon_grace);
  for (std::size_t i = 0; i < candidates.events.size(); ++i) {
    const bool table_less = session_.table_less.contains(candidates.events[i]->event_id);
    const bool own = candidates.follows_own_send[i] && candidates.xids[i] != 0 &&
                     (table_less ? !session_.table_rows
                                 : certain == 0 || occurred_since(candidates.events[i]->occurred_at,
                                                                  certain - grace.count()));
    if (own && !visible_xmin_.ended_before(candidates.xids[i], now) && !refreshed) {
      visible_xmin_.refresh(table_.connection(), now);  // once per batch, when it may help
      refreshed = true;
    }
    if (!own || !visible_xmin_.ended_before(candidates.xids[i], now)) asked.push_back(i);
  }
  return asked;
}

cdc_sql::StreamCheck CdcSource::check_candidates(const cdc::StreamBook::Candidates& candidates,
                                                 const std::vector<std::size_t>& asked) {
  cdc_sql::StreamCheck check;
  if (asked.empty()) return check;
  pg::ArrayLiteral ids, types, aggregates, sequences, check_lower, xids;
  for (const std::size_t i : asked) {
    const Event& event = *candidates.events[i];
    const auto table_less = session_.table_less.find(event.event_id);
    if (table_less == session_.table_less.end()) {
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
  const auto result = pg::exec_prepared(table_.connection(), check_sql_,
                                        pg::Params()
                                            .array(ids)
                                            .array(types)
                                            .array(aggregates)
                                            .array(sequences)
                                            .array(check_lower)
                                            .array(xids)
                                            .pointers());
  RelayCounters::add(counters_.check_queries, 1);
  check = cdc_sql::read_check_streamed(result);
  // Positions among those asked about, back to positions among the candidates (still sorted).
  for (auto* positions : {&check.invisible, &check.blocked, &check.finished}) {
    for (std::size_t& position : *positions) position = asked.at(position);
  }
  return check;
}

// With marks out, the wait is for their answers or the stream, whichever comes first; then what
// the stream brought is read at once. A mark's answer that made an aggregate's next event ready is
// news that never waits for a paced fetch; one that freed nothing is no news.
bool CdcSource::wait_for_news(milliseconds timeout) {
  live_news_ = false;
  bool freed = false;
  if (marks_.pending()) {
    const bool before = session_.book.has_candidates();
    collect_marks(timeout, stream_news_socket());  // with no time: only what has arrived
    freed = !before && session_.book.has_candidates();
    timeout = milliseconds(0);
  }
  if (polling()) return table_.wait_for_news(timeout) || freed;
  bool live = false;
  const bool got = read_stream(std::min(timeout, session_.stream->until_status_due()), &live);
  live_news_ = live && !freed && session_.live && session_.book.open_events() < kLive;
  return got || freed;
}

// A streaming relay looks by itself (registered awake: producers never notify it); a polling one
// listens as the polling relay does.
void CdcSource::set_listening(bool listening) {
  listening_ = listening;
  if (polling()) table_.set_listening(listening);
}

bool CdcSource::run_duties(Clock::time_point now, const SendWindow& window) {
  if (session_.witness_due && !polling() && session_.book.open_events() == 0 &&
      session_.table_less.empty() && !session_.hold_position) {
    restart_with_witness();
  }
  bool news = table_.run_duties(now, window);  // true: a dead relay session's claims to take over
  if (news && !polling()) table_due_ = true;   // at once, whatever the sweep's hold
  if (polling()) {
    news = fallback_duties(now, window) || news;
  } else if (now >= next_table_poll_) {
    next_table_poll_ = now + options_.cdc.table_poll;
    if (session_.sweep.may_begin(now)) {
      table_due_ = true;
      news = true;
    }
    if (!probe_caught_up() && session_.book.confirmable() > session_.confirmed_sent) {
      send_status(false);
    }
  }
  retry_unwritten();
  if (polling()) return news;
  if (session_.stream->status_due() || (confirm_due() && now >= next_confirm_)) {
    next_confirm_ = now + kTableLessConfirmEvery;
    send_status(false);
  }
  if (now >= next_sharding_sweep_) drop_other_shardings();
  if (now >= next_slot_look_) {
    next_slot_look_ = now + kSlotLookEvery;
    if (look_at_slot()) return true;  // let go: the table path claims from now on
  }
  return news;
}

CdcSource::Clock::time_point CdcSource::next_duty() const {
  if (polling()) return std::min(table_.next_duty(), Clock::now() + options_.cdc.table_poll);
  return std::min({table_.next_duty(), next_table_poll_,
                   confirm_due() ? next_confirm_ : Clock::time_point::max(),
                   Clock::now() + session_.stream->until_status_due()});
}

bool CdcSource::reconnect(SendWindow& window) {
  const bool reconnected = table_.reconnect(window);
  if (polling()) return reconnected;  // streams again when it may (fallback_duties)
  stream_or_stand_by();
  return reconnected;
}

void CdcSource::leave() noexcept {
  try {
    write_marks();  // written before the relay counts as gone
  } catch (const std::exception& error) {
    log().warn(
        "relay {}: stopped with streamed events' marks unwritten ({}); they are streamed "
        "again and their duplicates published",
        options_.relay_id, error.what());
  }
  table_.leave();
  try {
    if (session_.streaming()) {
      send_status(true);
      session_.stream->stop(std::chrono::seconds(1));
    }
  } catch (const std::exception& error) {
    log().debug("relay {}: ending the replication stream: {}", options_.relay_id, error.what());
  }
}

}  // namespace outbox::detail
