#include "relay/relay_sql.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace outbox::relay_sql {

namespace {

// The columns of a claimed event, as the claim and the mark's successor claim return them (the
// SELECT lists below, and `claimed`'s RETURNING list in lock_and_claim).
enum ClaimedColumn : int {
  kEventId = 0,
  kAggregateType,
  kAggregateId,
  kAggregateSequence,
  kEventType,
  kSchemaVersion,
  kPayload,
  kHeaders,
  kOccurredAt,
  kAttemptCount,
  kTakenOver,       // 'true': the row carried a lease that had expired or whose session ended
  kClaimedColumns,  // how many
};
constexpr const char* kClaimedSelectList =
    "event_id::text, aggregate_type, aggregate_id, aggregate_sequence::text, event_type,\n"
    "       schema_version::text, payload::text, headers::text, occurred_at::text, "
    "attempt_count::text, taken_over::text";

// The claim's last row (event_id NULL) reuses the first columns: the last aggregate visited
// (type, id), how many were visited, and the bytes the head it stopped at needs (NULL: it did
// not stop for bytes).
enum CursorColumn : int { kLastType = 1, kLastId = 2, kVisited = 3, kStoppedForBytes = 4 };

// mark_published: the claimed columns, then the kind: 'marked' (only event_id set) or 'claimed'.
constexpr int kMarkKind = kClaimedColumns;

// mark_failed: event_id, quarantined.
enum FailedColumn : int { kFailedEventId = 0, kQuarantined = 1, kInDoubt = 2 };

Event read_event(const pg::Result& result, int row) {
  Event e;
  e.event_id = EventId::parse(result.text(row, kEventId)).value_or(EventId{});
  e.aggregate_type = result.text(row, kAggregateType);
  e.aggregate_id = result.text(row, kAggregateId);
  e.aggregate_sequence = result.int64(row, kAggregateSequence);
  e.event_type = result.text(row, kEventType);
  e.schema_version = static_cast<std::int32_t>(result.int64(row, kSchemaVersion));
  e.payload = result.text(row, kPayload);
  e.headers = result.text(row, kHeaders);
  e.occurred_at = result.text(row, kOccurredAt);
  e.attempt_count = static_cast<std::int32_t>(result.int64(row, kAttemptCount));
  return e;
}

// The CTEs `locked` and `claimed` shared by the claim and the mark's successor claim: lock each
// candidate of CTE `candidates` (columns event_id, row_ctid: the row version the candidate query
// read) by its ctid, a TID scan that descends no index (on a table never analyzed the planner
// once preferred scanning a partial index whose predicate the conditions implied; where it
// believes the table empty, only the session's enable_seqscan = off keeps it from a sequential
// scan, see session_settings). FOR UPDATE follows a row that changed since the statement's snapshot
// to its newest version and locks that; such a row is left for the next claim (its ctid differs,
// and the UPDATE below, which sees only the snapshot, could not reach it). The conditions and the
// event id are checked on the locked version. Then claim what is pending, due and not leased
// (or leased to a dead relay session: `dead_param`, an array of the claim-token prefixes of
// sessions that ended; null where no such lease can occur)
// with token `token_param` for `lease_param` milliseconds, again by ctid: no one can change a
// locked row before the statement ends. Against looking both up by primary key, 23% fewer buffer
// accesses for the mark's successor claim (4,445 rows).
std::string lock_and_claim(const SchemaName& schema, const char* candidates,
                           const char* token_param, const char* lease_param,
                           const char* dead_param) {
  const std::string of_the_dead =
      dead_param == nullptr ? "" : fmt::format(" OR l.claimed_by ^@ ANY ({})", dead_param);
  return fmt::format(R"SQL(, locked AS (
  SELECT l.event_id, l.ctid AS row_ctid, l.claim_until IS NOT NULL AS taken_over
  FROM {candidates}
  CROSS JOIN LATERAL (
    SELECT e.ctid, e.event_id, e.published_at, e.skipped_at, e.available_at, e.claim_until,
           e.claimed_by
    FROM {events} e
    WHERE e.ctid = {candidates}.row_ctid
    OFFSET 0  -- a fence: the conditions below must not be pushed into this lookup
    FOR UPDATE SKIP LOCKED) l
  WHERE l.ctid = {candidates}.row_ctid AND l.event_id = {candidates}.event_id
    AND l.published_at IS NULL AND l.skipped_at IS NULL
    AND l.available_at <= now() AND (l.claim_until IS NULL OR l.claim_until < now(){of_the_dead})
), claimed AS (
  UPDATE {events} e
  SET claimed_by = {token}, claim_until = now() + {lease}::bigint * interval '1 millisecond'
  FROM locked k
  WHERE e.ctid = k.row_ctid AND e.event_id = k.event_id
  RETURNING e.event_id, e.aggregate_type, e.aggregate_id, e.aggregate_sequence, e.event_type,
            e.schema_version, e.payload, e.headers, e.occurred_at, e.attempt_count, k.taken_over
))SQL",
                     fmt::arg("candidates", candidates),
                     fmt::arg("events", schema.table("outbox_events")),
                     fmt::arg("token", token_param), fmt::arg("lease", lease_param),
                     fmt::arg("of_the_dead", of_the_dead));
}

// The CTE `sent`: the rows of the relay's arrays `arrays` (event ids first, then the columns
// named `columns`) whose event still carries their token (a NULL token: the row is claimed by no
// one, as the rows a change-data-capture relay streams are), each with the ctid and attempt_count
// of the row version the statement's snapshot sees, looked up one by one in the primary key. The
// statements below update by that ctid (a TID scan), so with the session's settings no plan of
// theirs reads the table any other way: the relay's plans are generic, made once per
// connection (relay.cpp), and a generic plan made while the table was empty once chose a
// sequential scan for `UPDATE ... FROM unnest(...) WHERE event_id = ...` and kept it as the table
// grew. A row that another transaction changed after the statement's snapshot may be passed over
// (PostgreSQL versions differ in whether a TID scan's recheck compares the ctid); the relay then
// tries those rows once more in a new statement (Relay::Impl::complete).
std::string sent(const SchemaName& schema, const char* arrays, const char* columns) {
  return fmt::format(R"SQL(sent AS MATERIALIZED (
  SELECT d.*, t.row_ctid, t.attempt_count
  FROM unnest({arrays}) AS d(event_id, {columns})
  CROSS JOIN LATERAL (
    SELECT e.ctid AS row_ctid, e.attempt_count, e.claimed_by FROM {events} e
    WHERE e.event_id = d.event_id
    LIMIT 1) t
  WHERE t.claimed_by IS NOT DISTINCT FROM d.token
))SQL",
                     fmt::arg("arrays", arrays), fmt::arg("columns", columns),
                     fmt::arg("events", schema.table("outbox_events")));
}

// The head of aggregate `a`, as the claim's visit after `v` (the aggregate visited before, and the
// bytes `v.held` the visit took so far) sees it: event_id, row_ctid; claimable (due, and not
// leased or leased to a dead session in $6); its stored size (pg_column_size, from the datum's
// header, nothing detoasted); alone: it is the first the visit takes while the relay holds nothing
// ($8) and its stored size is over half the budget $7, so nothing could join it: taken without
// being measured, and the visit stops after it; bytes, the length of its payload and header text,
// measured when it is claimable, not alone, and its stored size fits beside what is held; and
// taken: alone, or measured and fitting the budget beside what is held (or the first while the
// relay holds nothing: a row larger than the budget goes alone). The measure is made once, in the
// fenced level `k`, whose columns the levels above refer to.
std::string visit_head(const std::string& events, const std::string& shard) {
  return fmt::format(R"SQL(
    SELECT k.event_id, k.row_ctid, k.claimable, k.stored, k.bytes, k.alone,
           k.alone OR (k.bytes IS NOT NULL
                       AND (v.held + k.bytes <= $7::bigint OR (v.held = 0 AND $8::bool))) AS taken
    FROM (
      SELECT c.event_id, c.row_ctid, c.claimable, c.stored,
             c.claimable AND v.held = 0 AND $8::bool AND c.stored > $7::bigint / 2 AS alone,
             CASE WHEN c.claimable AND CASE WHEN v.held = 0 AND $8::bool
                                            THEN c.stored <= $7::bigint / 2
                                            ELSE v.held + c.stored <= $7::bigint END
                  THEN octet_length(c.payload::text)::bigint + octet_length(c.headers::text)
             END AS bytes
      FROM (
        SELECT e.event_id, e.ctid AS row_ctid, e.payload, e.headers,
               e.available_at <= now() AND (e.claim_until IS NULL OR e.claim_until < now()
                                            OR e.claimed_by ^@ ANY ($6::text[]))
                 AND (e.available_at <> e.occurred_at OR e.occurred_at < $9::timestamptz){shard}
                 AS claimable,
               pg_column_size(e.payload)::bigint + pg_column_size(e.headers) AS stored
        FROM {events} e
        WHERE e.published_at IS NULL AND e.skipped_at IS NULL
          AND e.aggregate_type = a.aggregate_type AND e.aggregate_id = a.aggregate_id
        ORDER BY e.aggregate_sequence
        LIMIT 1) c
      OFFSET 0) k)SQL",
                     fmt::arg("events", events),
                     fmt::arg("shard", shard.empty() ? std::string() : " AND " + shard));
}

}  // namespace

// - synchronous_commit off: the relay's own writes (claims, marks, failure records) do not wait
//   for an fsync each. A PostgreSQL crash can undo the last few hundred milliseconds of them, and
//   each undo only ever repeats work: an undone claim or mark makes the row claimable again (a
//   republish, same event id), an undone failure record a retry. Nothing the producers committed
//   depends on it. But an undone mark whose successor was already sent shows on the topic as
//   "k, k+1, k": RelayOptions::durable_marks turns it on for whoever must never see that.
// - Generic plans, made once per connection (and again after an ANALYZE or DDL of the table):
//   planning a claim took 0.34 ms against 0.05 ms to run one that found nothing, and under live
//   load the relay runs hundreds a second.
// - No sequential scans. A generic plan is costed with the table's size when it is made and then
//   kept, so every statement below is written to have one plan, by index and by ctid. PostgreSQL
//   still picks a sequential scan (and a sort) when it believes the table empty or tiny: after
//   VACUUM of an emptied table (retention deleted every row) or ANALYZE of a few rows, even in
//   place of a ctid lookup. Kept as the table grew, such plans read the whole table per statement:
//   in a test at 1,000 events/s the relay's session used a core and fell behind within seconds.
//   A statement with no other way to run still scans; none of these has one on outbox_events
//   (the sweep reads the few rows of outbox_relays so).
// - No bitmap scans. After heavy update churn autovacuum can leave statistics far below the truth
//   (measured: 2,096 tuples recorded for 200,000 live rows on 72,786 pages); a plan made then read
//   each head by a bitmap heap scan of all its aggregate's pending rows and a sort, instead of the
//   first entry of the pending index: the backlog read again, for every head. Every relay
//   statement reads by index condition or ctid; none wants a bitmap.
// - No JIT compilation. A plan that keeps a sequential scan carries enable_seqscan's penalty
//   (10^10 in its estimated cost), far past jit_above_cost, so PostgreSQL compiled the sweep's plan
//   at every run: 0.5-0.8 s each (measured), for a statement that runs in 0.1 ms. None of the
//   relay's statements runs long enough for JIT to pay off.
// - A lock timeout. A relay statement waits for a row lock only when an outside session holds one
//   on an outbox row (claims skip locked rows; marks touch rows this relay claimed, or streamed
//   rows no one claims), but each needs the table's own lock, which LOCK TABLE, a migration's
//   DDL or VACUUM FULL hold: without a limit the relay stood still for as long, and SIGTERM waited
//   behind the statement (33 s in a test). With it the statement fails retryably (55P03), the
//   relay reports database_unavailable, backs off, and sees a stop request within seconds.
// RelaySqlPlans checks every statement's generic plan under these settings, for an empty table
// never analyzed, an emptied and vacuumed one, three rows, a backlog and a history.
std::vector<std::string> session_settings(bool durable_marks) {
  return {durable_marks ? "SET synchronous_commit = on" : "SET synchronous_commit = off",
          "SET plan_cache_mode = force_generic_plan",
          "SET enable_seqscan = off",
          "SET enable_bitmapscan = off",
          "SET jit = off",
          "SET lock_timeout = 5000"};
}

std::string shard_condition(const std::string& prefix, unsigned shards, unsigned shard) {
  return fmt::format(
      "(hashtext({0}aggregate_type || '/' || {0}aggregate_id) & 2147483647) % {1} = {2}", prefix,
      shards, shard);
}

std::string claim(const SchemaName& schema, const std::string& shard) {
  // Finds heads without reading the backlog behind them: a skip scan over the pending-by-aggregate
  // index visits one entry per aggregate (at most $2 of them, starting after the cursor $4/$5),
  // and reads each one's lowest pending sequence. Cost grows with the batch, not with how many
  // events wait behind each head. Heads that are not due or are leased (to a live session) are
  // passed over.
  //
  // The horizon $9: a row no relay has touched has available_at = occurred_at (both the same
  // now() of its insert); a failure's backoff, a quarantine release and a delayed delivery move
  // available_at. A change-data-capture relay's own claim takes untouched rows only when they
  // are older than $9 (its stream's position less a grace): the newer ones come through its
  // stream. A polling relay passes 'infinity'.
  //
  // The byte budget: the visit keeps a running sum of the payload and header text of the heads it
  // takes, and stops at the first claimable head that would take the sum past $7 (the bytes the
  // relay may still hold), unless nothing is taken yet and $8 (the relay holds nothing): a row
  // larger than the whole budget goes alone. The measure is the length of the text the relay
  // receives, made by converting the jsonb: the stored size can be a fraction of it (compressed:
  // 4 MiB of text stored in a few KB; binary jsonb against escaped text). Only a head that is
  // claimable and whose stored size still fits is measured, so the rows the claim takes are
  // converted twice (measure, and output), and the one it stops at once in vain, at most; a row
  // stored larger than half the budget that the relay takes while holding nothing is not measured
  // (nothing could join it), so large rows going one by one are converted once, as before the
  // budget. Carrying the measured text out instead spilled every large row to temporary files
  // three times over (40 MB rows: 3.7 s a row against 1.4 s), and for small rows was slower still.
  // The visit starts from a seed row (the cursor) so that the head's expressions appear once: a
  // kept generic plan still compiles its expressions at every execution, and written twice (a first
  // term and a recursive one) they made a claim of 5 rows 14% slower than before the budget;
  // written once, claims of 5 and of 500 rows take 8-10% longer (docs/ARCHITECTURE.md, "Bytes in
  // flight").
  //
  // A head stays a head: lower sequences, once published or skipped, never become pending again,
  // and a lower sequence cannot commit after a higher one (the sequence row lock). So the locked
  // rows are rechecked (by PostgreSQL's re-evaluation of the WHERE clause on the newest row
  // version) only for being pending, due and free.
  //
  // The last row carries the cursor: event_id NULL, the last aggregate visited before any stop
  // (the cursor given, when the first one stopped it), how many were visited (fewer than $2 and no
  // stop: the scan reached the end of the pending aggregates), and the bytes the head it stopped
  // at needs (NULL: no stop).
  const std::string events = schema.table("outbox_events");
  return fmt::format(
      R"SQL(WITH RECURSIVE visited (aggregate_type, aggregate_id, n, event_id, row_ctid, taken, need, held,
                         last_type, last_id) AS (
  SELECT $4::text, $5::text, 0, NULL::uuid, NULL::tid, false, NULL::bigint, 0::bigint, $4::text,
         $5::text
  UNION ALL
  SELECT a.aggregate_type, a.aggregate_id, v.n + 1, h.event_id, h.row_ctid, h.taken,
         -- need: the visit stops (after a row taken alone: 0, any room will do)
         CASE WHEN h.alone THEN 0 WHEN h.claimable AND NOT h.taken THEN coalesce(h.bytes, h.stored)
         END,
         v.held + CASE WHEN h.taken THEN coalesce(h.bytes, h.stored) ELSE 0 END,
         CASE WHEN h.claimable AND NOT h.taken THEN v.last_type ELSE a.aggregate_type END,
         CASE WHEN h.claimable AND NOT h.taken THEN v.last_id ELSE a.aggregate_id END
  FROM visited v
  CROSS JOIN LATERAL (
    SELECT e.aggregate_type, e.aggregate_id
    FROM {events} e
    WHERE e.published_at IS NULL AND e.skipped_at IS NULL
      AND (e.aggregate_type, e.aggregate_id) > (v.aggregate_type, v.aggregate_id)
    ORDER BY e.aggregate_type, e.aggregate_id
    LIMIT 1) a
  CROSS JOIN LATERAL ({head}) h
  WHERE v.n < $2::int AND v.need IS NULL
), heads AS (
  SELECT event_id, row_ctid FROM visited WHERE taken
){lock_and_claim}
SELECT {claimed_columns}
FROM claimed
UNION ALL
SELECT NULL, last.last_type, last.last_id, (last.n - (last.need IS NOT NULL)::int)::text,
       last.need::text, NULL, NULL, NULL, NULL, NULL, NULL
FROM (SELECT n, need, last_type, last_id FROM visited ORDER BY n DESC LIMIT 1) last)SQL",
      fmt::arg("events", events), fmt::arg("head", visit_head(events, shard)),
      fmt::arg("claimed_columns", kClaimedSelectList),
      fmt::arg("lock_and_claim", lock_and_claim(schema, "heads", "$1", "$3", "$6::text[]")));
}

std::string mark_published(const SchemaName& schema) {
  // Idempotent for the claim that sent the row: writing the same batch again (its first try's
  // fate was lost with the connection) matches again and changes nothing.
  //
  // In the same statement it claims each marked event's successor (sequence + 1), which has just
  // become its aggregate's head (the marked row was the head: it was claimed as one, and a head
  // stays a head). So under load an aggregate's next event goes out one round trip after the
  // previous ack, without a scan for heads. The successor is locked and rechecked like a claimed
  // head (pending, due, not leased); a skipped successor is left to the regular claim.
  return fmt::format(
      R"SQL(WITH {sent}, marked AS (
  UPDATE {events} e
  SET published_at = coalesce(e.published_at, now()), claim_until = NULL, last_error = NULL
  FROM sent d
  WHERE e.ctid = d.row_ctid AND e.event_id = d.event_id
    AND e.claimed_by IS NOT DISTINCT FROM d.token AND e.skipped_at IS NULL
  RETURNING e.event_id, e.aggregate_type, e.aggregate_id, e.aggregate_sequence
), successors AS MATERIALIZED (
  -- One lookup per marked row in the (unique) pending index, whatever the statistics say: as a
  -- plain join, on a table never analyzed, the planner scanned the whole index once per marked
  -- row (7 s statements in the stalled-relay scenario).
  -- The byte budget ($6: the bytes the relay may still hold) as in the claim, over the successors
  -- in the order found: a successor whose stored size fits is measured (its text's length), and
  -- those whose running sum of measures fits are taken. The rest (also one larger than the whole
  -- budget: it goes alone through the regular claim) are left to the regular claim.
  SELECT w.event_id, w.row_ctid
  FROM (
    SELECT s.event_id, s.row_ctid, sum(s.bytes) OVER (ROWS UNBOUNDED PRECEDING) AS running
    FROM marked m
    CROSS JOIN LATERAL (
      SELECT e.event_id, e.ctid AS row_ctid,
             CASE WHEN pg_column_size(e.payload)::bigint + pg_column_size(e.headers) <= $6::bigint
                  THEN octet_length(e.payload::text)::bigint + octet_length(e.headers::text)
             END AS bytes
      FROM {events} e
      WHERE e.aggregate_type = m.aggregate_type AND e.aggregate_id = m.aggregate_id
        AND e.aggregate_sequence = m.aggregate_sequence + 1
        AND e.published_at IS NULL AND e.skipped_at IS NULL  -- the pending index's predicate
      LIMIT 1) s
    WHERE $5::bool AND s.bytes IS NOT NULL) w
  WHERE w.running <= $6::bigint
){lock_and_claim}
SELECT event_id::text, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'marked'
FROM marked
UNION ALL
SELECT {claimed_columns}, 'claimed'
FROM claimed)SQL",
      fmt::arg("claimed_columns", kClaimedSelectList),
      fmt::arg("events", schema.table("outbox_events")),
      fmt::arg("sent", sent(schema, "$1::uuid[], $2::text[]", "token")),
      fmt::arg("lock_and_claim", lock_and_claim(schema, "successors", "$3", "$4", nullptr)));
}

std::string mark_failed(const SchemaName& schema) {
  // Exponential backoff with "equal jitter": a delay drawn from [d/2, d], d = min(cap, base*2^n).
  // An unknown outcome at a destination that cannot recognise a repeat ($9) parks the row in
  // doubt: never due again until `outbox reconcile` settles it, its aggregate behind it.
  // No sooner than the destination asked (retry_after_ms, HTTP's Retry-After; 0: not asked).
  // A permanent failure, or the attempt that reaches the limit ($6 > 0), quarantines the row
  // instead: it keeps blocking its own aggregate and waits for an operator.
  return fmt::format(
      R"SQL(WITH {sent}
UPDATE {events} e
SET claimed_by = NULL, claim_until = NULL, attempt_count = e.attempt_count + 1,
    last_error = f.error,
    quarantined_at = CASE WHEN f.quarantine THEN now() END,
    quarantine_reason = CASE WHEN f.quarantine THEN f.reason END,
    in_doubt_at = CASE WHEN f.in_doubt THEN now() END,
    in_doubt_reason = CASE WHEN f.in_doubt THEN f.error END,
    available_at = CASE WHEN f.quarantine OR f.in_doubt THEN 'infinity'::timestamptz
                   ELSE now() + greatest(
                     least($5::float8, $4::float8 * power(2, least(e.attempt_count, 40)))
                       * (0.5 + random() * 0.5),
                     f.retry_after_ms) * interval '1 millisecond' END
FROM (SELECT d.*,
             NOT d.in_doubt AND (d.permanent OR ($6::int > 0 AND d.attempt_count + 1 >= $6::int))
               AS quarantine,
             CASE WHEN d.permanent THEN 'permanent failure'
                  ELSE 'gave up after ' || (d.attempt_count + 1) || ' attempts' END AS reason
      FROM sent d) f
WHERE e.ctid = f.row_ctid AND e.event_id = f.event_id
  AND e.claimed_by IS NOT DISTINCT FROM f.token AND e.published_at IS NULL AND e.skipped_at IS NULL
RETURNING e.event_id, e.quarantined_at IS NOT NULL, e.in_doubt_at IS NOT NULL)SQL",
      fmt::arg("events", schema.table("outbox_events")),
      fmt::arg(
          "sent",
          sent(schema, "$1::uuid[], $2::text[], $3::text[], $7::bool[], $8::float8[], $9::bool[]",
               "token, error, permanent, retry_after_ms, in_doubt")));
}

std::string renew(const SchemaName& schema) {
  return fmt::format(R"SQL(WITH {sent}
UPDATE {events} e
SET claim_until = now() + $3::bigint * interval '1 millisecond'
FROM sent d
WHERE e.ctid = d.row_ctid AND e.event_id = d.event_id AND e.claimed_by = d.token
  AND e.published_at IS NULL AND e.skipped_at IS NULL
RETURNING e.event_id)SQL",
                     fmt::arg("events", schema.table("outbox_events")),
                     fmt::arg("sent", sent(schema, "$1::uuid[], $2::text[]", "token")));
}

std::string adopt(const SchemaName& schema) {
  return fmt::format(R"SQL(WITH {sent}
UPDATE {events} e
SET claimed_by = $4, claim_until = now() + $3::bigint * interval '1 millisecond'
FROM sent d
WHERE e.ctid = d.row_ctid AND e.event_id = d.event_id AND e.claimed_by = d.token
  AND e.published_at IS NULL AND e.skipped_at IS NULL
RETURNING e.event_id::text)SQL",
                     fmt::arg("events", schema.table("outbox_events")),
                     fmt::arg("sent", sent(schema, "$1::uuid[], $2::text[]", "token")));
}

ClaimRows read_claim(const pg::Result& result) {
  ClaimRows rows;
  for (int row = 0; row < result.rows(); ++row) {
    if (!result.is_null(row, kEventId)) {
      rows.events.push_back(read_event(result, row));
      rows.taken_over_each.push_back(result.text(row, kTakenOver) == "true");
      if (rows.taken_over_each.back()) ++rows.taken_over;
      continue;
    }
    rows.visited_any = true;
    rows.last_type = result.text(row, kLastType);
    rows.last_id = result.text(row, kLastId);
    rows.visited = result.int64(row, kVisited);
    if (!result.is_null(row, kStoppedForBytes)) {
      rows.stopped_for_bytes = static_cast<std::uint64_t>(result.int64(row, kStoppedForBytes));
    }
  }
  return rows;
}

MarkRows read_mark_published(const pg::Result& result) {
  MarkRows rows;
  for (int row = 0; row < result.rows(); ++row) {
    if (result.text(row, kMarkKind) == "marked") {
      rows.marked.emplace_back(result.text(row, kEventId));
    } else {
      rows.successors.push_back(read_event(result, row));
      rows.taken_over_each.push_back(result.text(row, kTakenOver) == "true");
      if (rows.taken_over_each.back()) ++rows.taken_over;
    }
  }
  return rows;
}

std::vector<FailedRow> read_mark_failed(const pg::Result& result) {
  std::vector<FailedRow> rows;
  for (int row = 0; row < result.rows(); ++row) {
    rows.push_back({std::string(result.text(row, kFailedEventId)),
                    result.text(row, kQuarantined) == "t", result.text(row, kInDoubt) == "t"});
  }
  return rows;
}

}  // namespace outbox::relay_sql
