#!/usr/bin/env bash
# Drain rate of a table-less backlog by one CDC relay: N events (one message each, 200 aggregates
# per transaction) written while the relay is stopped, then the time until it published them all.
# Usage: scripts/bench/table_less_drain.sh OUTBOX_BINARY [TRANSACTIONS]   (200 aggregates each)
# (docs/PERFORMANCE.md, "Table-less producers": the witness costs nothing measurable)
set -euo pipefail
bin="$1"; txs="${2:-100}"
dev="${OUTBOX_DEV_BINARY:-$(dirname "$bin")/outbox-dev}"  # the throwaway servers
work="$(mktemp -d)"; trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$dev" postgres >"$work/pg.out" 2>"$work/pg.err" &
"$dev" kafka-mock >"$work/k.out" 2>"$work/k.err" &
until [[ -s "$work/pg.out" && -s "$work/k.out" ]]; do sleep 0.2; done
db="$(head -1 "$work/pg.out")"; brokers="$(head -1 "$work/k.out")"
"$bin" migrate --db "$db" >/dev/null 2>&1
relay() { "$bin" relay --db "$db" --kafka-brokers "$brokers" --source cdc --table-less --slot tlb \
  --wal-budget 0 --stats-every 200ms --stats-format json >"$work/relay.out" 2>>"$work/relay.err" & rpid=$!; }
relay; sleep 2; kill -TERM "$rpid"; wait "$rpid" || true

for ((t = 1; t <= txs; t++)); do
cat <<SQL
BEGIN;
INSERT INTO outbox.outbox_aggregate_sequences AS q (aggregate_type, aggregate_id, last_sequence)
SELECT 'order', 'order-' || a, $t FROM generate_series(1, 200) AS a
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = EXCLUDED.last_sequence;
SELECT count(pg_logical_emit_message(true, 'outbox:outbox', json_build_object(
  'xid', pg_current_xact_id()::text, 'occurred_at', now()::text,
  'aggregate_type', 'order', 'aggregate_id', 'order-' || a,
  'events', json_build_array(json_build_object('event_id', gen_random_uuid(), 'sequence', $t,
     'event_type', 'OrderStepped', 'schema_version', 1,
     'payload', jsonb_build_object('step', $t, 'note', repeat('x', 200))::text, 'headers', '{}')))::text))
FROM generate_series(1, 200) AS a;
COMMIT;
SQL
done | psql "$db" -X -q >/dev/null
want=$((txs * 200))
start=$(date +%s.%N)
relay
until tail -n 1 "$work/relay.out" 2>/dev/null | grep -q "\"published\":$want[,}]"; do
  sleep 0.05
  if ! kill -0 "$rpid" 2>/dev/null; then echo "relay died"; tail "$work/relay.err"; exit 1; fi
done
end=$(date +%s.%N)
kill -TERM "$rpid"; wait "$rpid" || true
python3 -c "d=$end-$start; print(f'$want table-less events drained in {d:.2f} s: {$want/d:.0f} events/s')"
grep -c "not published" "$work/relay.err" || true
