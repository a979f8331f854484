#include "ops/backlog_sql.hpp"

#include <fmt/format.h>

namespace outbox::detail {

// Two kinds of rows. 'type': pending rows by aggregate type, most pending first, with the age
// of the oldest aggregate head that should be going: due, or tried before (a retry waiting
// out its backoff), and not quarantined nor in doubt (each counted on its own); a delayed event
// counts from its available_at (deliver_after), and an event waiting behind its aggregate's head is
// the head's wait, not a second one. 'slow': the ten aggregates whose head has waited longest, by
// the same measure (a quarantined head is the quarantine table's, a delayed one not yet due is not
// waiting), with their pending rows counted from the index. The heads are one pass over the pending
// index, the counts one over the pending rows: the cost grows with the backlog, not the history.
std::string backlog_sql(const SchemaName& schema) {
  return fmt::format(R"SQL(
WITH heads AS MATERIALIZED (
  SELECT DISTINCT ON (aggregate_type, aggregate_id)
         aggregate_type, aggregate_id,
         CASE WHEN quarantined_at IS NOT NULL OR in_doubt_at IS NOT NULL THEN NULL
              WHEN attempt_count > 0 THEN occurred_at
              WHEN available_at <= now() THEN greatest(occurred_at, available_at) END AS since
  FROM {events}
  WHERE published_at IS NULL AND skipped_at IS NULL
  ORDER BY aggregate_type, aggregate_id, aggregate_sequence),
counts AS (
  SELECT aggregate_type,
         count(*) FILTER (WHERE quarantined_at IS NULL AND in_doubt_at IS NULL) AS pending,
         count(*) FILTER (WHERE quarantined_at IS NOT NULL) AS quarantined,
         count(*) FILTER (WHERE in_doubt_at IS NOT NULL) AS in_doubt
  FROM {events}
  WHERE published_at IS NULL AND skipped_at IS NULL
  GROUP BY aggregate_type),
ages AS (
  SELECT aggregate_type, extract(epoch FROM now() - min(since)) AS age
  FROM heads GROUP BY aggregate_type),
slowest AS (
  SELECT aggregate_type, aggregate_id, since FROM heads
  WHERE since IS NOT NULL ORDER BY since, aggregate_type, aggregate_id LIMIT 10)
SELECT 'type', c.aggregate_type, NULL, c.pending::text, coalesce(a.age, 0)::text,
       c.quarantined::text, c.in_doubt::text
FROM counts c LEFT JOIN ages a USING (aggregate_type)
UNION ALL
SELECT 'slow', s.aggregate_type, s.aggregate_id,
       (SELECT count(*) FROM {events} e
        WHERE e.published_at IS NULL AND e.skipped_at IS NULL
          AND e.aggregate_type = s.aggregate_type AND e.aggregate_id = s.aggregate_id)::text,
       extract(epoch FROM now() - s.since)::text, NULL, NULL
FROM slowest s)SQL",
                     fmt::arg("events", schema.table("outbox_events")));
}

}  // namespace outbox::detail
