#!/usr/bin/env bash
# The relay's memory is bounded by bytes, not rows: ROWS events of ROW_MIB MiB each (every one the
# head of its own aggregate, so all are claimable at once) are published by one relay with the
# discard sink, and its peak resident size is measured by GNU time. Fails when the peak exceeds
# three times the larger of the budget and one row, plus 100 MiB for the process itself (the
# README's "the process needs about three times that").
#
#   tests/cli/relay_memory.sh OUTBOX_BINARY [ROWS=20] [ROW_MIB=40] [BUDGET=64MiB]
#
# ctest label `slow` (not run by `make test`; about a minute and ~1 GB of WAL with the defaults):
#   cd build && ctest -L slow --output-on-failure
# Measured on the 2-core machine: docs/PERFORMANCE.md, "Relay memory".
# Needs: psql on PATH, PostgreSQL server binaries (found by `outbox-dev postgres`), /usr/bin/time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init relay_memory outbox-relay-memory

outbox_binary="$(realpath "${1:?usage: relay_memory.sh OUTBOX_BINARY [ROWS] [ROW_MIB] [BUDGET]}")"
rows="${2:-20}"
row_mib="${3:-40}"
budget="${4:-64MiB}"
startup_timeout_s=60
[[ -x /usr/bin/time ]] || fatal "needs GNU time at /usr/bin/time (Debian package time)"

start_postgres
"$outbox_binary" migrate --db "$db" >/dev/null

# Each payload is ROW_MIB MiB of text as the relay receives it (md5 hex, compressible on disk).
psql "$db" -X -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO outbox.outbox_events
  (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, payload)
SELECT gen_random_uuid(), 'order', 'big-' || a, 1, 'Step',
       jsonb_build_object('data', repeat(md5(a::text), $row_mib * 32768))
FROM generate_series(1, $rows) a;
SQL

/usr/bin/time -v -o "$work_dir/time.txt" "$outbox_binary" relay --db "$db" --sink discard \
  --max-in-flight-bytes "$budget" --stats-every 1s >"$work_dir/relay.out" 2>&1 &
relay_pid=$!
track_background "$relay_pid" "outbox relay"
started=$SECONDS
pending="$rows"
while ((SECONDS - started < 600)); do
  pending="$(psql "$db" -X -q -A -t -c \
    "SELECT count(*) FROM outbox.outbox_events WHERE published_at IS NULL")"
  ((pending == 0)) && break
  kill -0 "$relay_pid" 2>/dev/null || fatal --log "$work_dir/relay.out" "the relay exited early"
  sleep 0.5
done
elapsed=$((SECONDS - started))
# SIGTERM to the relay itself (GNU time, its parent, writes the figures once it exits).
relay_child="$(pgrep -P "$relay_pid" || true)"
[[ -n "$relay_child" ]] && kill -TERM "$relay_child"
wait "$relay_pid" || true
((pending == 0)) || fatal --log "$work_dir/relay.out" "$pending of $rows rows unpublished after 600 s"

peak_kib="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work_dir/time.txt")"
((${peak_kib:-0} > 0)) || fatal --log "$work_dir/time.txt" "GNU time reported no peak RSS"
budget_bytes="$(psql "$db" -X -q -A -t -c "SELECT pg_size_bytes(replace('$budget', 'iB', 'B'))")"
row_bytes=$((row_mib * 1024 * 1024))
held=$((budget_bytes > row_bytes ? budget_bytes : row_bytes))
limit_kib=$(((3 * held + 100 * 1024 * 1024) / 1024))
echo "relay_memory: $rows rows of $row_mib MiB, budget $budget: all published in ${elapsed} s," \
  "peak RSS $((peak_kib / 1024)) MiB (limit $((limit_kib / 1024)) MiB)"
if ((peak_kib <= limit_kib)); then
  pass
else
  fail "peak RSS ${peak_kib} KiB exceeds ${limit_kib} KiB"
fi
summary_and_exit
