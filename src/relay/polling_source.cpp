#include "relay/polling_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "common/fault.hpp"
#include "common/log.hpp"
#include "pg/array_literal.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

namespace {

// At most `limit` bytes of `text`, not ending inside a UTF-8 sequence (PostgreSQL refuses those).
std::string_view utf8_prefix(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

// Refuses a schema without migration 17 (9: the relays' session locks; 10: the table-less slots a
// relay looks up; 12: the session's backend; 14: where a table-less slot's proof begins; 15: the
// slot a session streams, in its row; 17: what the session published; 18: events in doubt) with
// what to do, instead of a missing column or table later.
void check_schema(PGconn* conn, const SchemaName& schema) {
  constexpr int kNeeded = 18;
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
                             const std::string& claim_scope, const HealthBoard* health)
    : options_(options),
      counters_(counters),
      health_(health),
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
  for (std::size_t i = 0; i < rows.events.size(); ++i) {
    fetched.events.push_back(
        {std::move(rows.events[i]), token, Origin::claimed, rows.taken_over_each[i]});
  }
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
        for (std::size_t i = 0; i < rows.successors.size(); ++i) {
          successors.push_back(
              {std::move(rows.successors[i]), token, Origin::claimed, rows.taken_over_each[i]});
        }
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
  std::vector<std::string> quarantined, in_doubt;
  complete(
      mark_failed_sql_, failed,
      [&](const std::vector<const Outcome*>& of) {
        pg::ArrayLiteral errors, permanent, retry_after, doubt;
        for (const Outcome* outcome : of) {
          errors.add(utf8_prefix(outcome->error, 2000));
          permanent.add_plain(outcome->permanent ? "t" : "f");
          retry_after.add_plain(std::to_string(outcome->retry_after.count()));
          doubt.add_plain(outcome->in_doubt ? "t" : "f");
        }
        return std::vector<std::string>{errors.text(),
                                        std::to_string(options_.backoff_base.count()),
                                        std::to_string(options_.backoff_max.count()),
                                        std::to_string(options_.max_attempts),
                                        permanent.text(),
                                        retry_after.text(),
                                        doubt.text()};
      },
      [&](const pg::Result& result) {
        std::vector<std::string> ids;
        for (relay_sql::FailedRow& row : relay_sql::read_mark_failed(result)) {
          if (row.quarantined) quarantined.push_back(row.event_id);
          if (row.in_doubt) in_doubt.push_back(row.event_id);
          ids.push_back(std::move(row.event_id));
        }
        return ids;
      },
      unwritten, std::nullopt);
  RelayCounters::add(counters_.failed, failed.size());
  note_set_aside(failed, quarantined, in_doubt);
  failed.clear();
}

void PollingSource::note_set_aside(const std::vector<Outcome>& failed,
                                   const std::vector<std::string>& quarantined,
                                   const std::vector<std::string>& in_doubt) {
  RelayCounters::add(counters_.in_doubt, in_doubt.size());
  for (const std::string& event_id : in_doubt) {
    log().error(
        "relay {}: event {} is in doubt (no answer after it was sent, to a destination that "
        "cannot recognise a repeat); its aggregate waits for `outbox reconcile`",
        relay_id(), event_id);
  }
  if (!quarantined.empty()) {
    std::unordered_map<std::string, std::uint32_t> types;
    for (const Outcome& outcome : failed) types.emplace(outcome.event_id.to_string(), outcome.type);
    for (const std::string& event_id : quarantined) {
      if (const auto it = types.find(event_id); it != types.end()) {
        counters_.by_type.add(it->second, TypedCounts::quarantined);
      }
    }
  }
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
