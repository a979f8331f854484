#pragma once
// Migration 19: the gap-aware inbox's tables (InboxOrdering, outbox/inbox.hpp; docs/CONSUMING.md).

namespace outbox::detail {

// When a held event counts as parked: failed or of an unknown version at once, a waiting one once
// park_at has passed. The one definition the consumer's gauges, `outbox status`, `outbox inbox
// list` and the admin page read.
inline constexpr const char* kHeldIsParked = "(kind <> 'waiting' OR park_at <= now())";

inline constexpr const char* kGapAwareInbox = R"SQL(
-- Per consumer and aggregate, the highest sequence whose effect committed (NULL: the consumer
-- took the aggregate's first event without applying it). A gap-aware inbox applies k+1 only after
-- k; its transaction locks the aggregate's row first, so two instances of one consumer take an
-- aggregate's events one after the other. Never cleaned up: without its row an aggregate would
-- start again at sequence 1.
CREATE TABLE {s}.inbox_aggregates (
  consumer_name  text   NOT NULL,
  aggregate_type text   NOT NULL,
  aggregate_id   text   NOT NULL,
  last_sequence  bigint CHECK (last_sequence >= 0),
  PRIMARY KEY (consumer_name, aggregate_type, aggregate_id)
);

-- Events a gap-aware inbox took but did not apply, whole (the broker has them acknowledged):
-- 'waiting' for a predecessor (applied in the transaction that applies it; reported parked once
-- park_at has passed), 'failed' (the effect raised on every attempt), 'unknown_version' (no
-- upcaster reaches the consumer's version). An operator's decision, 'release' (apply it now,
-- accepting any gap before it) or 'skip' (go on as if applied, without its effect), is carried
-- out by the consumer.
CREATE TABLE {s}.inbox_parked (
  consumer_name      text        NOT NULL,
  event_id           uuid        NOT NULL,
  aggregate_type     text        NOT NULL,
  aggregate_id       text        NOT NULL,
  aggregate_sequence bigint      NOT NULL,
  event_type         text        NOT NULL,
  schema_version     integer     NOT NULL,
  payload            bytea       NOT NULL,
  traceparent        text        NOT NULL,
  topic              text        NOT NULL,
  partition          integer     NOT NULL,
  "offset"           bigint      NOT NULL,
  kind               text        NOT NULL CHECK (kind IN ('waiting', 'failed', 'unknown_version')),
  reason             text        NOT NULL,
  held_at            timestamptz NOT NULL DEFAULT now(),
  park_at            timestamptz NOT NULL,
  decision           text        CHECK (decision IN ('release', 'skip')),
  decided_by         text,
  PRIMARY KEY (consumer_name, event_id)
);
CREATE INDEX inbox_parked_aggregate_idx
  ON {s}.inbox_parked (consumer_name, aggregate_type, aggregate_id, aggregate_sequence);

ALTER TABLE {s}.outbox_operator_audit ADD COLUMN consumer_name text;
ALTER TABLE {s}.outbox_operator_audit
  DROP CONSTRAINT outbox_operator_audit_action_check,
  ADD CONSTRAINT outbox_operator_audit_action_check
    CHECK (action IN ('retry', 'skip', 'replay', 'reconcile_published', 'reconcile_retry',
                      'reconcile_skip', 'inbox_release', 'inbox_skip'));
)SQL";

}  // namespace outbox::detail
