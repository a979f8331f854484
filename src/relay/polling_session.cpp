// PollingSource's relay session (polling_source.hpp): its connection and advisory lock, its
// outbox_relays row (registration, heartbeat, the stream a source built on it names), a reconnect
// that moves what the relay holds to the new session, leaving, and the sweep of sessions that
// ended.
#include <fmt/format.h>

#include <random>
#include <unordered_map>
#include <unordered_set>

#include "common/log.hpp"
#include "pg/array_literal.hpp"
#include "pg/params.hpp"
#include "relay/polling_source.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

// A relay's connection: the session settings (asynchronous commit, generic plans without
// sequential scans; explained in relay_sql.cpp, next to the statements they are for), LISTEN, and
// the session's advisory lock, held until the session ends. Its key is random per session (a
// relay that reconnects while its old session lingers on a half-open connection must not wait for
// itself) and non-negative (relay_sql::sweep reads it back from pg_locks).
PollingSource::Session PollingSource::open_session(const RelayOptions& options) {
  auto connection = relay_sql::open_relay_session(options.database_url, options.durable_marks);
  static thread_local std::mt19937_64 random(std::random_device{}());
  std::int64_t lock_key = 0;
  for (;;) {  // a key some other session holds already (2^-63 per session) is simply redrawn
    lock_key = static_cast<std::int64_t>(random() >> 1);
    const std::string key_text = std::to_string(lock_key);
    if (pg::exec(connection.get(), relay_sql::take_session_lock(), {key_text.c_str()}).text(0, 0) ==
        "t") {
      break;
    }
  }
  connection.listen('"' + options.schema.notify_channel() + '"');
  return Session{std::move(connection), lock_key};
}

// A new connection is a new session: its own lock, row id and token prefix. The previous
// session is retired with the first registration of this one (set_listening).
void PollingSource::begin_session() {
  if (!session_id_.empty()) previous_session_id_ = session_id_;
  session_id_ = fmt::format("{}:{:016x}", options_.relay_id, session_.lock_key);
  published_before_session_ = published_reported_;
}

// Records in outbox_relays whether producers must wake us (true) or we look by ourselves; the
// first call of a session registers it, and retires the session before it (after a reconnect).
// The row of that session stays until its leases are over: what we still hold of it moved to
// this session (adopt_claims), so what is left under it is ours no longer (a mark the crash
// undid, a claim whose answer the lost connection never brought) and is taken over once it
// counts as dead. Deleting the row instead left such claims to their lease, since a token whose
// session no row names is never found dead: the last event of a hot aggregate then reached the
// broker 12-23 s after the last commit (`outbox_campaign paused-across-restart`).
void PollingSource::set_listening(bool listening) {
  register_session(listening);
  if (!previous_session_id_.empty()) {
    pg::exec_prepared(session_.connection.get(), retire_relay_sql_, {previous_session_id_.c_str()});
    previous_session_id_.clear();
  }
}

void PollingSource::register_session(bool listening) {
  pg::Params params;
  params.text(session_id_)
      .boolean(listening)
      .integer(session_.lock_key)
      .integer(options_.lease.count());
  if (stream_.slot.empty()) {
    params.null().null().null();
  } else {
    params.text(stream_.slot).text(stream_.mode);
    if (stream_.walsender == 0)
      params.null();
    else
      params.integer(stream_.walsender);
  }
  const std::uint64_t published = counters_.published.load(std::memory_order_relaxed);
  params.integer(static_cast<std::int64_t>(published - published_before_session_));
  if (health_ == nullptr)
    params.null();
  else
    params.text(std::string(to_string(health_->health())));
  pg::exec_prepared(session_.connection.get(), set_listening_sql_, params.pointers());
  published_reported_ = published;
  listening_ = listening;
  last_heartbeat_ = Clock::now();
}

void PollingSource::set_stream(StreamNote note) {
  if (note == stream_) return;
  stream_ = std::move(note);
  register_session(listening_);
}

bool PollingSource::reconnect(SendWindow& window) {
  const bool renewed_session = !session_.connection.healthy();
  if (!renewed_session) {
    renew_leases(window);
    return false;
  }
  session_ = open_session(options_);
  begin_session();
  // Registered before any claim moves to it: a token whose session no row names is never found
  // dead (an adopt that committed but whose answer a broken connection lost would leave its rows
  // so until their lease).
  register_session(listening_);
  adopt_claims(window);
  return true;
}

// What the relay holds (events in flight, outcomes not written yet) moves from the previous
// session's tokens to one of this session, with a fresh lease: once the previous session is
// retired and counts as dead, only what the relay no longer holds is taken over. A row someone
// took over meanwhile stays theirs; its mark is fenced as any stale relay's. As for completions
// (complete()), rows the first statement passed over (changed since its snapshot: a statement
// of the old session still running) get one more try.
void PollingSource::adopt_claims(SendWindow& window) {
  last_renewal_ = Clock::now();
  std::unordered_map<std::string, std::string> held;  // event id: the token it was claimed under
  const auto add = [&](const EventId& event_id, Origin origin, const std::string& token) {
    if (origin == Origin::claimed) held.emplace(event_id.to_string(), token);
  };
  for (const auto& [ticket, item] : window.in_flight()) {
    add(item.event.event_id, item.origin, item.token);
  }
  for (const Outcome& outcome : window.published()) {
    add(outcome.event_id, outcome.origin, outcome.token);
  }
  for (const Outcome& outcome : window.failed()) {
    add(outcome.event_id, outcome.origin, outcome.token);
  }
  if (held.empty()) return;
  const std::string token = next_token();
  const std::string lease_text = std::to_string(options_.lease.count());
  const std::size_t claimed = held.size();
  std::unordered_set<std::string> moved;
  for (int attempt = 0; attempt < 2 && !held.empty(); ++attempt) {
    pg::ArrayLiteral ids, tokens;
    for (const auto& [event_id, held_token] : held) {
      ids.add_plain(event_id);
      tokens.add(held_token);
    }
    const auto result = pg::exec_prepared(
        session_.connection.get(), adopt_sql_,
        {ids.text().c_str(), tokens.text().c_str(), lease_text.c_str(), token.c_str()});
    for (int row = 0; row < result.rows(); ++row) {
      std::string event_id(result.text(row, 0));
      held.erase(event_id);
      moved.insert(std::move(event_id));
    }
  }
  window.retoken(moved, token);
  if (!held.empty()) {
    log().warn(
        "relay {}: {} of the {} row(s) it held were no longer its own after it reconnected "
        "(taken over by another relay, or marked already); their marks will be fenced",
        relay_id(), held.size(), claimed);
  }
}

// A relay that stops no longer counts as awake, so producers notify the others again.
void PollingSource::leave() noexcept {
  try {
    pg::exec_prepared(session_.connection.get(), forget_relay_sql_, {session_id_.c_str()});
  } catch (const std::exception& error) {
    log().info(
        "relay {}: could not remove its outbox_relays row ({}); the other relays find its "
        "session ended within a second",
        relay_id(), error.what());
  }
}

// Looks for relay sessions that ended (relay_sql::sweep). Claims held by sessions dead past
// their grace become claimable by the next claim; returns true when that set grew.
bool PollingSource::sweep() {
  const std::string grace = std::to_string(kSessionGrace.count());
  const std::string restart_grace = std::to_string(kRestartGrace.count());
  const auto result = pg::exec_prepared(session_.connection.get(), sweep_sql_,
                                        {grace.c_str(), restart_grace.c_str()});
  std::vector<DeadSessions::Ended> ended;
  for (relay_sql::EndedSession& row : relay_sql::read_sweep(result)) {
    if (row.until_dead_ms > 0) {
      log().debug("relay {}: relay session {} ended; dead in {:.0f} ms unless it is back",
                  relay_id(), row.id, row.until_dead_ms);
    }
    ended.push_back({std::move(row.id), row.until_dead_ms});
  }
  const std::vector<std::string> newly_dead = dead_sessions_.update(ended, Clock::now());
  for (const std::string& id : newly_dead) {
    log().warn(
        "relay {}: relay session {} ended without stopping (killed, cut off past the grace, or "
        "replaced by its relay's reconnect); what is still claimed under it is taken over now, "
        "not when the leases run out",
        relay_id(), id);
  }
  return !newly_dead.empty();
}

}  // namespace outbox::detail
