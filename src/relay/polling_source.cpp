#include "relay/polling_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "common/fault.hpp"
#include "common/log.hpp"
#include "pg/array_literal.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

namespace {

using milliseconds = std::chrono::milliseconds;

// A relay refreshes its outbox_relays row this often, awake or listening; producers ignore rows
// older than 30 s (migrations 3 and 6), so a relay that died awake stops suppressing NOTIFY soon,
// and one that died listening stops asking for it. (A live relay's sweep takes a dead session's
// row out of their count sooner.)
constexpr std::chrono::seconds kHeartbeat{10};

// Every relay looks this often for relay sessions that ended (relay_sql::sweep): one statement
// on the small outbox_relays table and pg_locks, never on the claim's path. A session seen ended
// counts as dead after kSessionGrace, or kRestartGrace if it began before the server's last start
// (every relay then reconnects at once, the last after up to reconnect_backoff_max, 5 s by
// default). Then its claims are taken over at once instead of after their lease: after a SIGKILL
// another relay publishes them within kSweepEvery + kSessionGrace + a claim.
constexpr milliseconds kSweepEvery{500};
constexpr milliseconds kSessionGrace{1000};
constexpr milliseconds kRestartGrace{10000};

// At most `limit` bytes of `text`, not ending inside a UTF-8 sequence (PostgreSQL refuses those).
std::string_view utf8_prefix(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

// Refuses a schema without migration 14 (9: the relays' session locks; 10: the table-less slots a
// relay looks up; 12: the session's backend; 14: where a table-less slot's proof begins) with
// what to do, instead of a missing column or table later.
void check_schema(PGconn* conn, const SchemaName& schema) {
  constexpr int kNeeded = 14;
  std::int64_t version = 0;
  try {
    version = pg::exec(conn, relay_sql::schema_version(schema)).int64(0, 0);
  } catch (const DatabaseError& error) {
    if (error.sqlstate() != "42P01") throw;  // undefined table: never migrated
  }
  if (version < kNeeded) {
    throw ConfigError(fmt::format(
        "relay: schema {} is at version {}; this relay needs version {} or later (run `outbox "
        "migrate` before deploying relays of this build)",
        schema.name(), version, kNeeded));
  }
}

}  // namespace

PollingSource::PollingSource(const RelayOptions& options, RelayCounters& counters,
                             const std::string& claim_scope)
    : options_(options),
      counters_(counters),
      session_(open_session(options)),
      claim_sql_(relay_sql::claim(options.schema, claim_scope)),
      mark_published_sql_(relay_sql::mark_published(options.schema)),
      mark_failed_sql_(relay_sql::mark_failed(options.schema)),
      renew_sql_(relay_sql::renew(options.schema)),
      adopt_sql_(relay_sql::adopt(options.schema)),
      set_listening_sql_(relay_sql::set_listening(options.schema)),
      forget_relay_sql_(relay_sql::forget_relay(options.schema)),
      retire_relay_sql_(relay_sql::retire_relay(options.schema)),
      sweep_sql_(relay_sql::sweep(options.schema)),
      dead_sessions_(kSweepEvery),
      last_renewal_(Clock::now()) {
  check_schema(session_.connection.get(), options_.schema);
  begin_session();
}

// A relay's connection: the session settings (asynchronous commit, generic plans without
// sequential scans; explained in relay_sql.cpp, next to the statements they are for), LISTEN, and
// the session's advisory lock, held until the session ends. Its key is random per session (a
// relay that reconnects while its old session lingers on a half-open connection must not wait for
// itself) and non-negative (relay_sql::sweep reads it back from pg_locks).
PollingSource::Session PollingSource::open_session(const RelayOptions& options) {
  auto connection = pg::Connection::open(options.database_url, std::string(kRelayApplicationName));
  for (const std::string& setting : relay_sql::session_settings(options.durable_marks)) {
    pg::exec(connection.get(), setting);
  }
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
}

// A fresh token per claim: a mark must match the exact claim that sent the row, so even this
// relay cannot complete a row it re-claimed after its own lease ran out. The session part
// (random per connection) keeps tokens unique also when a relay id is reused (a restarted
// process, a reconnect), and names the session whose claims are taken over once it is dead.
std::string PollingSource::next_token() {
  return fmt::format("{}:{}", session_id_, ++claim_epoch_);
}

Fetched PollingSource::fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) {
  const std::string token = next_token();
  const std::string limit_text = std::to_string(limit);
  const std::string lease_text = std::to_string(options_.lease.count());
  const std::string bytes_text = std::to_string(byte_room);
  const std::string horizon_text = claim_horizon_.sql_text();
  const auto result = pg::exec_prepared(
      session_.connection.get(), claim_sql_,
      {token.c_str(), limit_text.c_str(), lease_text.c_str(), cursor_type_.c_str(),
       cursor_id_.c_str(), dead_sessions_.prefixes().c_str(), bytes_text.c_str(),
       holding_nothing ? "true" : "false", horizon_text.c_str()});
  RelayCounters::add(counters_.claim_queries, 1);
  relay_sql::ClaimRows rows = relay_sql::read_claim(result);
  if (!rows.events.empty()) OUTBOX_FAULT(fault::kRelayAfterClaim);
  Fetched fetched;
  // Continue after the last aggregate visited, or start over at the end. A claim that stopped at
  // a row the byte budget could not hold continues at that row once the budget can.
  fetched.waiting_bytes = rows.stopped_for_bytes.value_or(0);
  fetched.began_mid_way = !cursor_type_.empty() || !cursor_id_.empty();
  fetched.reached_end = !rows.visited_any || (!rows.stopped_for_bytes.has_value() &&
                                              static_cast<std::size_t>(rows.visited) < limit);
  cursor_type_ = fetched.reached_end ? std::string() : std::move(rows.last_type);
  cursor_id_ = fetched.reached_end ? std::string() : std::move(rows.last_id);
  for (Event& event : rows.events) fetched.events.push_back({std::move(event), token});
  RelayCounters::add(counters_.claimed, fetched.events.size());
  RelayCounters::add(counters_.leases_taken_over, rows.taken_over);
  if (!fetched.events.empty()) {
    counters_.claim_batch.observe(static_cast<double>(fetched.events.size()));
  }
  return fetched;
}

bool PollingSource::wait_for_news(milliseconds timeout) {
  return session_.connection.wait_for_notifications(timeout) > 0;
}

bool PollingSource::run_duties(Clock::time_point now, const SendWindow& window) {
  if (now - last_heartbeat_ > kHeartbeat) set_listening(listening_);
  // Relay sessions that ended: their claims need not wait for their leases to run out.
  const bool taken_over = now >= dead_sessions_.next_sweep() && sweep();
  // After a stall (a long GC-like pause, SIGSTOP) our leases may have run out, and a claim must
  // not re-take rows this relay still has in flight under an older token: renew before claiming.
  if (now - last_renewal_ > options_.lease / 3) renew_leases(window);
  return taken_over;
}

PollingSource::Clock::time_point PollingSource::next_duty() const {
  return std::min(last_heartbeat_ + kHeartbeat, dead_sessions_.next_sweep());
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
  const std::string key_text = std::to_string(session_.lock_key);
  const std::string lease_text = std::to_string(options_.lease.count());
  pg::exec_prepared(
      session_.connection.get(), set_listening_sql_,
      {session_id_.c_str(), listening ? "true" : "false", key_text.c_str(), lease_text.c_str()});
  listening_ = listening;
  last_heartbeat_ = Clock::now();
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

void PollingSource::renew_leases(const SendWindow& window) {
  last_renewal_ = Clock::now();
  pg::ArrayLiteral ids, tokens;
  std::size_t claimed = 0;  // unclaimed events hold no lease
  for (const auto& [ticket, item] : window.in_flight()) {
    if (item.origin == Origin::unclaimed) continue;
    ids.add(item.event.event_id);
    tokens.add(item.token);
    ++claimed;
  }
  if (claimed == 0) return;
  const std::string lease_text = std::to_string(options_.lease.count());
  const auto result =
      pg::exec_prepared(session_.connection.get(), renew_sql_,
                        {ids.text().c_str(), tokens.text().c_str(), lease_text.c_str()});
  if (static_cast<std::size_t>(result.rows()) < claimed) {
    log().warn("relay {}: {} in-flight row(s) lost their lease to another relay", relay_id(),
               claimed - static_cast<std::size_t>(result.rows()));
  }
}

std::vector<SourcedEvent> PollingSource::record_published(std::vector<Outcome>& published,
                                                          bool take_successors,
                                                          std::uint64_t successor_bytes) {
  return write_published(published, take_successors, successor_bytes, nullptr);
}

void PollingSource::record_failed(std::vector<Outcome>& failed) { write_failed(failed, nullptr); }

void PollingSource::record_unclaimed_published(std::vector<Outcome>& published,
                                               std::vector<Outcome>& unwritten) {
  write_published(published, false, 0, &unwritten);
}

void PollingSource::record_unclaimed_failed(std::vector<Outcome>& failed,
                                            std::vector<Outcome>& unwritten) {
  write_failed(failed, &unwritten);
}

std::vector<SourcedEvent> PollingSource::write_published(std::vector<Outcome>& published,
                                                         bool take_successors,
                                                         std::uint64_t successor_bytes,
                                                         std::vector<Outcome>* unwritten) {
  if (published.empty()) return {};
  OUTBOX_FAULT(fault::kRelayAfterAckBeforeMark);
  const std::string token = next_token();
  const std::string lease_text = std::to_string(options_.lease.count());
  const std::string bytes_text = std::to_string(successor_bytes);
  // Successors only in the first try: what a second try (for rows the first passed over) would
  // take is not counted in the byte room yet, so those successors are left to the regular claim.
  bool first_try = take_successors;
  std::size_t marked = 0;
  std::vector<SourcedEvent> successors;
  const std::size_t statements = complete(
      mark_published_sql_, published,
      [&](const auto&) {
        const char* claim_successors = first_try ? "true" : "false";
        first_try = false;
        return std::vector<std::string>{token, lease_text, claim_successors, bytes_text};
      },
      [&](const pg::Result& result) {
        relay_sql::MarkRows rows = relay_sql::read_mark_published(result);
        marked += rows.marked.size();
        RelayCounters::add(counters_.leases_taken_over, rows.taken_over);
        for (Event& event : rows.successors) successors.push_back({std::move(event), token});
        return std::move(rows.marked);
      },
      unwritten, TypedCounts::published);
  published.clear();
  RelayCounters::add(counters_.mark_queries, statements);
  OUTBOX_FAULT(fault::kRelayAfterMark);
  RelayCounters::add(counters_.published, marked);
  RelayCounters::add(counters_.claimed, successors.size());
  RelayCounters::add(counters_.successors, successors.size());
  return successors;
}

void PollingSource::write_failed(std::vector<Outcome>& failed, std::vector<Outcome>* unwritten) {
  if (failed.empty()) return;
  std::vector<std::string> quarantined;
  complete(
      mark_failed_sql_, failed,
      [&](const std::vector<const Outcome*>& of) {
        pg::ArrayLiteral errors, permanent;
        for (const Outcome* outcome : of) {
          errors.add(utf8_prefix(outcome->error, 2000));
          permanent.add_plain(outcome->permanent ? "t" : "f");
        }
        return std::vector<std::string>{errors.text(),
                                        std::to_string(options_.backoff_base.count()),
                                        std::to_string(options_.backoff_max.count()),
                                        std::to_string(options_.max_attempts), permanent.text()};
      },
      [&](const pg::Result& result) {
        std::vector<std::string> ids;
        for (relay_sql::FailedRow& row : relay_sql::read_mark_failed(result)) {
          if (row.quarantined) quarantined.push_back(row.event_id);
          ids.push_back(std::move(row.event_id));
        }
        return ids;
      },
      unwritten, std::nullopt);
  RelayCounters::add(counters_.failed, failed.size());
  if (!quarantined.empty()) {
    std::unordered_map<std::string, std::uint32_t> types;
    for (const Outcome& outcome : failed) types.emplace(outcome.event_id.to_string(), outcome.type);
    for (const std::string& event_id : quarantined) {
      if (const auto it = types.find(event_id); it != types.end()) {
        counters_.by_type.add(it->second, TypedCounts::quarantined);
      }
    }
  }
  failed.clear();
  RelayCounters::add(counters_.quarantined, quarantined.size());
  for (const std::string& event_id : quarantined) {
    log().error(
        "relay {}: event {} quarantined; its aggregate waits for an operator "
        "(outbox quarantine list | retry | skip)",
        relay_id(), event_id);
  }
}

// The statements update by ctid (relay_sql.cpp). A row that another transaction changed after
// the statement's snapshot (the same completion or a renewal still running on a connection we
// lost; an operator's skip) may be passed over (PostgreSQL versions differ in how they recheck a
// TID scan), so the rows that did not match get one more try in a new statement, which finds
// their newest version: only rows that are truly no longer ours count as fenced.
std::size_t PollingSource::complete(const std::string& sql, const std::vector<Outcome>& outcomes,
                                    const ExtraParams& extra, const ReadRows& read_rows,
                                    std::vector<Outcome>* unwritten,
                                    std::optional<TypedCounts::Kind> done) {
  std::vector<const Outcome*> pending;
  for (const Outcome& outcome : outcomes) pending.push_back(&outcome);
  std::size_t statements = 0;
  for (int attempt = 0; attempt < 2 && !pending.empty(); ++attempt) {
    pg::ArrayLiteral ids, tokens;
    for (const Outcome* outcome : pending) {
      ids.add(outcome->event_id);
      if (outcome->origin == Origin::unclaimed) {
        tokens.add_null();  // claimed by no one
      } else {
        tokens.add(outcome->token);
      }
    }
    const std::vector<std::string> extra_values = extra(pending);
    std::vector<const char*> params{ids.text().c_str(), tokens.text().c_str()};
    for (const std::string& value : extra_values) params.push_back(value.c_str());
    const pg::Result result = pg::exec_prepared(session_.connection.get(), sql, params);
    ++statements;
    const std::vector<std::string> matched_list = read_rows(result);
    if (matched_list.size() == pending.size()) {  // the usual case: every row matched
      pending.clear();
      break;
    }
    const std::unordered_set<std::string> matched(matched_list.begin(), matched_list.end());
    std::erase_if(pending, [&](const Outcome* outcome) {
      return matched.contains(outcome->event_id.to_string());
    });
  }
  if (done) {
    for (const Outcome& outcome : outcomes) {
      if (std::find(pending.begin(), pending.end(), &outcome) == pending.end()) {
        counters_.by_type.add(outcome.type, *done);
      }
    }
  }
  if (!pending.empty() && unwritten != nullptr) {
    for (const Outcome* outcome : pending) unwritten->push_back(*outcome);
  } else if (!pending.empty()) {
    RelayCounters::add(counters_.fenced, pending.size());
    for (const Outcome* outcome : pending) {
      counters_.by_type.add(outcome->type, TypedCounts::fenced);
    }
    log().warn(
        "relay {}: {} completion(s) fenced (first: event {}): the rows were re-claimed by another "
        "relay after our lease expired, or skipped (a newer claim publishes them; a duplicate "
        "publish is possible)",
        relay_id(), pending.size(), pending.front()->event_id.to_string());
  }
  return statements;
}

}  // namespace outbox::detail
