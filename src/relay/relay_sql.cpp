#include "relay/relay_sql.hpp"

#include <fmt/format.h>

namespace outbox::relay_sql {

std::string claim(const SchemaName& schema) {
  return fmt::format(R"SQL(WITH due AS (
  SELECT e.event_id
  FROM {events} e
  WHERE e.published_at IS NULL AND e.skipped_at IS NULL
    AND e.available_at <= now()
    AND (e.claim_until IS NULL OR e.claim_until < now())
    AND NOT EXISTS (
      SELECT 1 FROM {events} p
      WHERE p.published_at IS NULL AND p.skipped_at IS NULL
        AND p.aggregate_type = e.aggregate_type
        AND p.aggregate_id = e.aggregate_id
        AND p.aggregate_sequence < e.aggregate_sequence)
  ORDER BY e.available_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE {events} e
SET claimed_by = $1, claim_until = now() + $3::bigint * interval '1 millisecond'
FROM due
WHERE e.event_id = due.event_id
RETURNING e.event_id, e.aggregate_type, e.aggregate_id, e.aggregate_sequence, e.event_type,
          e.schema_version, e.payload::text, e.headers::text, e.occurred_at, e.attempt_count)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

std::string mark_published(const SchemaName& schema) {
  return fmt::format(R"SQL(UPDATE {events} e
SET published_at = now(), claim_until = NULL, last_error = NULL
FROM unnest($1::uuid[], $2::text[]) AS d(event_id, token)
WHERE e.event_id = d.event_id AND e.claimed_by = d.token
  AND e.published_at IS NULL AND e.skipped_at IS NULL
RETURNING e.event_id)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

std::string mark_failed(const SchemaName& schema) {
  // Exponential backoff with "equal jitter": a delay drawn from [d/2, d], d = min(cap, base*2^n).
  // A permanent failure, or the attempt that reaches the limit ($6 > 0), quarantines the row
  // instead: it keeps blocking its own aggregate and waits for an operator.
  return fmt::format(R"SQL(WITH failed AS (
  SELECT d.event_id, d.token, d.error,
         d.permanent OR ($6::int > 0 AND e.attempt_count + 1 >= $6::int) AS quarantine,
         CASE WHEN d.permanent THEN 'permanent failure'
              ELSE 'gave up after ' || (e.attempt_count + 1) || ' attempts' END AS reason
  FROM unnest($1::uuid[], $2::text[], $3::text[], $7::bool[]) AS d(event_id, token, error, permanent)
  JOIN {events} e ON e.event_id = d.event_id
)
UPDATE {events} e
SET claimed_by = NULL, claim_until = NULL, attempt_count = e.attempt_count + 1,
    last_error = f.error,
    quarantined_at = CASE WHEN f.quarantine THEN now() END,
    quarantine_reason = CASE WHEN f.quarantine THEN f.reason END,
    available_at = CASE WHEN f.quarantine THEN 'infinity'::timestamptz
                   ELSE now() + least($5::float8, $4::float8 * power(2, least(e.attempt_count, 40)))
                                * (0.5 + random() * 0.5) * interval '1 millisecond' END
FROM failed f
WHERE e.event_id = f.event_id AND e.claimed_by = f.token
  AND e.published_at IS NULL AND e.skipped_at IS NULL
RETURNING e.event_id, e.quarantined_at IS NOT NULL)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

std::string renew(const SchemaName& schema) {
  return fmt::format(R"SQL(UPDATE {events} e
SET claim_until = now() + $3::bigint * interval '1 millisecond'
FROM unnest($1::uuid[], $2::text[]) AS d(event_id, token)
WHERE e.event_id = d.event_id AND e.claimed_by = d.token
  AND e.published_at IS NULL AND e.skipped_at IS NULL
RETURNING e.event_id)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

}  // namespace outbox::relay_sql
