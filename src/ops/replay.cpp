#include "outbox/replay.hpp"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "common/printable.hpp"
#include "ops/audit_text.hpp"
#include "outbox/error.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

// The chosen rows, with the filter as $1..$5 (since, until, type, id, event id).
constexpr const char* kChosen =
    "published_at IS NOT NULL AND skipped_at IS NULL"
    " AND occurred_at >= $1::timestamptz"
    " AND occurred_at < coalesce(nullif($2::text, '')::timestamptz, now())"
    " AND ($3::text IS NULL OR aggregate_type = $3::text)"
    " AND ($4::text IS NULL OR aggregate_id = $4::text)"
    " AND ($5::uuid IS NULL OR event_id = $5::uuid)";

struct FilterParams {
  std::string since, until, type, id, event_id;
  std::vector<const char*> values;

  explicit FilterParams(const ReplayFilter& filter)
      : since(filter.since),
        until(filter.until),
        type(filter.aggregate_type.value_or("")),
        id(filter.aggregate_id.value_or("")),
        event_id(filter.event_id ? filter.event_id->to_string() : "") {
    if (since.empty()) {
      throw InvalidArgument("replay needs a start (since): the first occurred_at to replay");
    }
    values = {since.c_str(), until.c_str(), filter.aggregate_type ? type.c_str() : nullptr,
              filter.aggregate_id ? id.c_str() : nullptr,
              filter.event_id ? event_id.c_str() : nullptr};
  }
};

// A filter PostgreSQL cannot read is the caller's mistake: say which part.
pg::Result run_filtered(PGconn* conn, const std::string& sql,
                        const std::vector<const char*>& params, const ReplayFilter& filter) {
  try {
    return pg::exec(conn, sql, params);
  } catch (const DatabaseError& error) {
    if (error.sqlstate().rfind("22", 0) == 0) {  // data exceptions: bad timestamp, out of range
      throw InvalidArgument(fmt::format(
          "replay: since \"{}\" / until \"{}\" must be timestamps PostgreSQL reads, such as "
          "2026-12-01T18:00:00Z or \"2026-12-01 18:00+01\" ({})",
          filter.since, filter.until, error.what()));
    }
    throw;
  }
}

// A window that can hold nothing is a mistake, not "0 events": until not after since (reversed or
// empty), or since in the future.
void check_window(PGconn* conn, const FilterParams& params, const ReplayFilter& filter) {
  const auto result =
      run_filtered(conn,
                   "SELECT $1::timestamptz >= coalesce(nullif($2, '')::timestamptz, now()), "
                   "$1::timestamptz > now()",
                   {params.values[0], params.values[1]}, filter);
  if (result.text(0, 1) == "t") {
    throw InvalidArgument(fmt::format(
        "replay: since \"{}\" is in the future: nothing has occurred after it yet. Give a time "
        "before now (2026-12-01T18:00:00Z) or a duration ago (2h)",
        detail::printable(filter.since, 80)));
  }
  if (result.text(0, 0) == "t") {
    throw InvalidArgument(fmt::format(
        "replay: the window is empty: until \"{}\" is not after since \"{}\"; give an --until "
        "later than --since (or none: now)",
        detail::printable(filter.until, 80), detail::printable(filter.since, 80)));
  }
}

// The statements one batch of a replay runs, made once for the whole replay.
struct ReplayStatements {
  std::string busy;
  std::string touch;
  std::string replay;
  std::string tell_cdc;
};

ReplayStatements replay_statements(const SchemaName& schema) {
  const std::string events = schema.table("outbox_events");
  ReplayStatements statements;
  // Locks the batch's pending rows (a relay's claim skips locked rows, so none is claimed while
  // this transaction decides) and names the aggregates one of whose rows is under a live lease.
  statements.busy = fmt::format(R"SQL(SELECT p.aggregate_type, p.aggregate_id,
       p.claim_until IS NOT NULL AND p.claim_until > now()
FROM {events} p
JOIN unnest($1::text[], $2::text[]) AS a(chosen_type, chosen_id)
  ON p.aggregate_type = a.chosen_type AND p.aggregate_id = a.chosen_id
WHERE p.published_at IS NULL AND p.skipped_at IS NULL
FOR UPDATE OF p)SQL",
                                fmt::arg("events", events));
  // A new version of each pending row of the aggregates replayed: a claim whose snapshot is older
  // than this transaction still sees such a row as its aggregate's head, and would lock and claim
  // it after the commit, ahead of the replayed events; a row changed since its snapshot is left by
  // the claim's lock step (lock_and_claim in relay_sql.cpp) for the next claim, which sees the
  // replayed events first.
  statements.touch = fmt::format(R"SQL(UPDATE {events} p
SET available_at = p.available_at
FROM unnest($1::text[], $2::text[]) AS a(chosen_type, chosen_id)
WHERE p.aggregate_type = a.chosen_type AND p.aggregate_id = a.chosen_id
  AND p.published_at IS NULL AND p.skipped_at IS NULL)SQL",
                                 fmt::arg("events", events));
  // claimed_by 'replay': no relay's mark of an earlier publish (written again after a lost
  // answer) can match the row and mark the replay done unsent.
  statements.replay = fmt::format(R"SQL(WITH chosen AS (
  UPDATE {events} e
  SET published_at = NULL, claimed_by = 'replay', claim_until = NULL, attempt_count = 0,
      last_error = NULL, available_at = now()
  FROM unnest($6::text[], $7::text[]) AS a(chosen_type, chosen_id)
  WHERE e.aggregate_type = a.chosen_type AND e.aggregate_id = a.chosen_id AND {chosen}
  RETURNING e.event_id
)
INSERT INTO {audit} (event_id, action, actor, reason)
SELECT event_id, 'replay', $8, $9 FROM chosen
RETURNING event_id::text)SQL",
                                  fmt::arg("events", events),
                                  fmt::arg("audit", schema.table("outbox_operator_audit")),
                                  fmt::arg("chosen", kChosen));
  statements.tell_cdc = fmt::format(
      "SELECT CASE WHEN current_setting('wal_level') = 'logical' "
      "THEN pg_logical_emit_message(true, '{}', '') END",
      schema.replay_message_prefix());
  return statements;
}

using AggregateKeys = std::vector<std::pair<std::string, std::string>>;

// Locks the batch's pending rows (statements.busy) and returns the aggregates one of whose rows
// is under a live lease.
std::set<std::pair<std::string, std::string>> lock_busy(PGconn* conn, const std::string& busy_sql,
                                                        const AggregateKeys& batch_aggregates) {
  pg::ArrayLiteral all_types, all_ids;
  for (const auto& [type, id] : batch_aggregates) {
    all_types.add(type);
    all_ids.add(id);
  }
  const auto locked = pg::exec(conn, busy_sql, {all_types.text().c_str(), all_ids.text().c_str()});
  std::set<std::pair<std::string, std::string>> busy;
  for (int i = 0; i < locked.rows(); ++i) {
    if (locked.text(i, 2) == "t") busy.emplace(locked.text(i, 0), locked.text(i, 1));
  }
  return busy;
}

// One batch of whole aggregates in one transaction: the busy ones left out, the rest replayed
// and audited, the CDC relays told.
void replay_batch(PGconn* conn, const ReplayStatements& statements, const FilterParams& params,
                  const AggregateKeys& batch_aggregates, const std::string& actor,
                  const std::string& reason, ReplayResult& result) {
  pg::exec(conn, "BEGIN");
  try {
    const auto busy = lock_busy(conn, statements.busy, batch_aggregates);
    pg::ArrayLiteral types, ids;
    for (const auto& aggregate : batch_aggregates) {
      if (busy.contains(aggregate)) continue;
      types.add(aggregate.first);
      ids.add(aggregate.second);
    }
    result.busy_aggregates += busy.size();
    pg::exec(conn, statements.touch, {types.text().c_str(), ids.text().c_str()});
    std::vector<const char*> values = params.values;
    values.push_back(types.text().c_str());
    values.push_back(ids.text().c_str());
    values.push_back(actor.c_str());
    values.push_back(reason.c_str());
    const auto replayed = pg::exec(conn, statements.replay, values);
    if (replayed.rows() > 0) pg::exec(conn, statements.tell_cdc);
    pg::commit(conn);
    for (int i = 0; i < replayed.rows(); ++i) {
      result.replayed.push_back(EventId::parse(replayed.text(i, 0)).value_or(EventId{}));
    }
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

void check_replay_request(PGconn* conn, const std::string& actor, const std::string& reason) {
  if (actor.empty()) throw InvalidArgument("replay needs an actor (who did it) for the audit");
  if (reason.empty()) throw InvalidArgument("replay needs a reason for the audit record");
  detail::check_audit_text("replay", "actor", actor);
  detail::check_audit_text("replay", "reason", reason);
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument("replay needs an idle connection; it runs its own transactions");
  }
}

}  // namespace

ReplayPlan plan_replay(PGconn* conn, const SchemaName& schema, const ReplayFilter& filter) {
  const FilterParams params(filter);
  check_window(conn, params, filter);
  const auto result = run_filtered(
      conn,
      fmt::format("SELECT count(*), count(DISTINCT (aggregate_type, aggregate_id)), "
                  "coalesce(min(occurred_at)::text, ''), coalesce(max(occurred_at)::text, '') "
                  "FROM {} WHERE {}",
                  schema.table("outbox_events"), kChosen),
      params.values, filter);
  ReplayPlan plan;
  plan.events = result.int64(0, 0);
  plan.aggregates = result.int64(0, 1);
  plan.first_occurred_at = result.text(0, 2);
  plan.last_occurred_at = result.text(0, 3);
  return plan;
}

ReplayResult replay_published(PGconn* conn, const SchemaName& schema, const ReplayFilter& given,
                              const std::string& actor, const std::string& reason,
                              const std::function<void(std::size_t, std::size_t)>& progress,
                              std::size_t batch_events) {
  check_replay_request(conn, actor, reason);
  // One end for every statement: "now" would move between the batches.
  ReplayFilter filter = given;
  if (filter.until.empty())
    filter.until = std::string(pg::exec(conn, "SELECT now()::text").text(0, 0));
  const FilterParams params(filter);
  check_window(conn, params, filter);
  // The aggregates with chosen events, and how many each: whole aggregates go per transaction.
  const auto aggregates = run_filtered(
      conn,
      fmt::format("SELECT aggregate_type, aggregate_id, count(*) FROM {} WHERE {} "
                  "GROUP BY aggregate_type, aggregate_id ORDER BY aggregate_type, aggregate_id",
                  schema.table("outbox_events"), kChosen),
      params.values, filter);
  std::size_t total = 0;
  for (int row = 0; row < aggregates.rows(); ++row) {
    total += static_cast<std::size_t>(aggregates.int64(row, 2));
  }
  const ReplayStatements statements = replay_statements(schema);
  ReplayResult result;
  std::size_t done = 0;
  int row = 0;
  while (row < aggregates.rows()) {
    AggregateKeys batch_aggregates;
    std::size_t batch = 0;
    for (; row < aggregates.rows() && (batch == 0 || batch < batch_events); ++row) {
      batch_aggregates.emplace_back(aggregates.text(row, 0), aggregates.text(row, 1));
      batch += static_cast<std::size_t>(aggregates.int64(row, 2));
    }
    replay_batch(conn, statements, params, batch_aggregates, actor, reason, result);
    done += batch;
    if (progress) progress(done, total);
  }
  return result;
}

std::size_t count_published(PGconn* conn, const SchemaName& schema,
                            const std::vector<EventId>& event_ids) {
  if (event_ids.empty()) return 0;
  const std::string ids = pg::uuid_array(event_ids);
  return static_cast<std::size_t>(
      pg::exec(conn,
               "SELECT count(*) FROM " + schema.table("outbox_events") +
                   " WHERE event_id = ANY ($1::uuid[]) AND published_at IS NOT NULL",
               {ids.c_str()})
          .int64(0, 0));
}

}  // namespace outbox
