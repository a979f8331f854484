#!/usr/bin/env bash
# `outbox relay --source cdc` as an operator runs it: a private PostgreSQL and the Kafka mock
# cluster as separate processes, events written by plain SQL, a change-data-capture relay
# streaming them, `outbox status` (text and --json) and the admin page's overview naming it and
# its standby, SIGTERM, a restart that resumes from the slot, the refusals of CDC options that
# cannot work, two shards run by one process, the WAL budget with a paused broker (status says
# the slot was let go), table-less events (no rows: the slot is their only copy) and the refusals
# that keep them from being lost, kcat reading what reached Kafka (every event, each key in
# order), and `outbox cdc drop` tearing it down (refused for a missing, a streamed and, without
# --force, a table-less slot).
#
# Usage: relay_cdc.sh /path/to/outbox
# Needs: psql, curl and kcat on PATH, PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: relay_cdc.sh /path/to/outbox}"
readonly schema=cdccli
readonly slot=cli_slot
readonly topic=outbox.order
readonly aggregates=5
readonly per_round=4  # events per aggregate in each round
readonly startup_timeout_s=30
readonly publish_timeout_s=60
wal_budget=256MiB  # section 6 lowers it

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init relay_cdc outbox-cdc-test

# Round `round` of events: `per_round` more per aggregate, one transaction, as the producer
# writes them (rows and sequences together).
write_round() {
  local round="$1" first last
  first=$(((round - 1) * per_round + 1))
  last=$((round * per_round))
  sql >/dev/null <<SQL
BEGIN;
INSERT INTO $schema.outbox_events
  (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, payload)
SELECT gen_random_uuid(), 'order', 'order-' || a, s, 'OrderStepped', jsonb_build_object('step', s)
FROM generate_series(1, $aggregates) AS a, generate_series($first, $last) AS s ORDER BY a, s;
INSERT INTO $schema.outbox_aggregate_sequences AS q (aggregate_type, aggregate_id, last_sequence)
SELECT 'order', 'order-' || a, $last FROM generate_series(1, $aggregates) AS a
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = EXCLUDED.last_sequence;
COMMIT;
SQL
}

# Waits until `outbox status` says `published N`; fails naming the last status.
wait_published() {
  local want="$1" status_line="" deadline=$((SECONDS + publish_timeout_s))
  while ((SECONDS < deadline)); do
    status_line="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
    if [[ "$status_line" =~ published\ ([0-9]+) ]] && ((BASH_REMATCH[1] == want)); then
      pass
      return 0
    fi
    sleep 0.2
  done
  show_log "relay stderr" "$work_dir/relay.err"
  fail "outbox status should reach \"published $want\" within ${publish_timeout_s} s; last: $status_line"
  return 1
}

start_relay() {
  : >"$work_dir/relay.out"
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
    --source cdc --slot "$slot" --wal-budget "$wal_budget" --stats-every 1s --stats-format json "$@" \
    >"$work_dir/relay.out" 2>>"$work_dir/relay.err" &
  relay_pid=$!
  track_background "$relay_pid" "relay"
}

# SIGTERM: the relay must drain and exit 0.
stop_relay() {
  kill -TERM "$relay_pid"
  local rc=0
  wait "$relay_pid" || rc=$?
  if ((rc == 0)); then pass; else
    show_log "relay stderr" "$work_dir/relay.err"
    fail "the CDC relay should exit 0 after SIGTERM; it exited $rc"
  fi
}

# --- 1. PostgreSQL, the Kafka mock cluster, the schema ------------------------------------------
start_postgres
start_kafka_mock  # sets kafka_pid, stopped and resumed in section 6
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"

# --- 2. options that cannot work are refused before anything connects ---------------------------
expect_failure "--slot with capitals" "slot name" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --slot Bad-Slot
expect_failure "--wal-budget under 1 MiB" "cdc.wal_budget" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --wal-budget 10KiB
expect_failure "--wal-budget with an ambiguous unit" "ambiguous" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --wal-budget 4GB
expect_failure "--takeover of two hours" "at most 1 hour" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --takeover 2h

# --- 3. the relay streams: every event published, none claimed, the slot in status --------------
start_relay
deadline=$((SECONDS + startup_timeout_s))
status_text=""
while ((SECONDS < deadline)); do
  status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
  [[ "$status_text" == *"slot $slot: streamed (walsender "* ]] && break
  sleep 0.2
done
if [[ "$status_text" == *"slot $slot: streamed (walsender "*"wal_status reserved, holds "*" MiB of WAL"* ]]; then
  pass
else
  show_log "relay stderr" "$work_dir/relay.err"
  fatal "outbox status should show slot $slot streamed within ${startup_timeout_s} s; it said: $status_text"
fi
# Who streams it and who waits: a second relay is its standby, both named by status (text and
# --json), the streaming one checked against the slot's walsender.
"$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --slot "$slot" --relay-id cli-standby >/dev/null 2>>"$work_dir/standby.err" &
standby_pid=$!
track_background "$standby_pid" "standby relay"
deadline=$((SECONDS + startup_timeout_s))
while ((SECONDS < deadline)); do
  status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
  [[ "$status_text" == *"standby: relay cli-standby:"* ]] && break
  sleep 0.2
done
if [[ "$status_text" == *"slot $slot: streamed (walsender "*") by relay "*"; standby: relay cli-standby:"* &&
      "$status_text" == *"working, streams slot $slot"* &&
      "$status_text" == *"relay cli-standby:"*"standby for slot $slot"* ]]; then
  pass
else
  show_log "standby stderr" "$work_dir/standby.err"
  fail "status should name the streaming relay and its standby; it said: $status_text"
fi
status_json="$("$outbox_binary" status --db "$db" --schema "$schema" --json 2>&1)" || true
if [[ "$status_json" == *'"standbys":["cli-standby:'* && "$status_json" == *'"streamed_by":"'* &&
      "$status_json" == *'"slot_mode":"standby"'* && "$status_json" == *'"slot_mode":"streaming"'* ]]; then
  pass
else
  fail "status --json should name the streaming relay and its standby; it said: $status_json"
fi
# The admin page's overview lists the same (its parts table shows each part's detail).
"$outbox_binary" admin --db "$db" --schema "$schema" --listen 127.0.0.1:0 \
  >"$work_dir/admin.out" 2>&1 &
admin_pid=$!
track_background "$admin_pid" "outbox admin"
admin_port="$(listening_port "$work_dir/admin.out" "$admin_pid")" ||
  fatal --log "$work_dir/admin.out" "outbox admin did not say where it serves"
overview="$(curl -s "http://127.0.0.1:$admin_port/api/overview")" || true
if [[ "$overview" == *"streams slot $slot"* && "$overview" == *"standby for slot $slot"* ]]; then
  pass
else
  fail "the admin page's overview should name the streaming relay and its standby: $overview"
fi
kill -TERM "$admin_pid" "$standby_pid"
wait "$admin_pid" || fail "outbox admin should exit 0 after SIGTERM"
wait "$standby_pid" || fail "the standby relay should exit 0 after SIGTERM"

write_round 1
write_round 2
wait_published $((2 * aggregates * per_round))
claimed="$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE claimed_by IS NOT NULL")"
if [[ "$claimed" == "0" ]]; then pass; else
  fail "streamed events are published without a claim; $claimed row(s) were claimed"
fi
# The stats line reports the slot's lag (measured every second while streaming).
deadline=$((SECONDS + 10))
while ((SECONDS < deadline)) && ! grep -q '"slot_retained_bytes":[0-9]' "$work_dir/relay.out"; do
  sleep 0.2
done
if grep -q '"slot_retained_bytes":[0-9]' "$work_dir/relay.out" &&
   grep -q '"polling_fallback":false' "$work_dir/relay.out"; then
  pass
else
  fail "the relay's JSON stats should carry slot_retained_bytes and polling_fallback; got: $(tail -n 2 "$work_dir/relay.out")"
fi
stop_relay
if [[ "$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" == *"slot $slot: not streamed"* ]]; then
  pass
else
  fail "after the relay stopped, status should show slot $slot not streamed"
fi

# --- 4. written while no relay ran: the slot keeps it, a restart resumes -------------------------
write_round 3
start_relay
wait_published $((3 * aggregates * per_round))
stop_relay

# --- 5. two shards in one process: two slots streamed, the unsharded slot dropped ----------------
expect_failure "--shards without --source cdc" "add --source cdc" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --shards 2
expect_failure "--shard past --shards" "the shard is 0 to 1" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --shards 2 --shard 2
start_relay --shards 2
deadline=$((SECONDS + startup_timeout_s))
while ((SECONDS < deadline)); do
  status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
  [[ "$status_text" == *"slot ${slot}_0_of_2: streamed"*"slot ${slot}_1_of_2: streamed"* ]] && break
  sleep 0.2
done
if [[ "$status_text" == *"slot ${slot}_0_of_2: streamed"*"slot ${slot}_1_of_2: streamed"* &&
      "$status_text" != *"slot $slot:"* ]]; then
  pass
else
  show_log "relay stderr" "$work_dir/relay.err"
  fail "with --shards 2 status should show two streamed shard slots and not $slot; it said: $status_text"
fi
write_round 4
wait_published $((4 * aggregates * per_round))
stop_relay
# Each shard runs as its own relay, with its own id: two distinct ids print stats.
shard_ids="$(grep -o '"relay_id": *"[^"]*"' "$work_dir/relay.out" | sort -u | wc -l)"
if [[ "$shard_ids" -eq 2 ]]; then pass; else
  fail "two shards print stats under two relay ids; got $shard_ids: $(cat "$work_dir/relay.out")"
fi

# --- 6. the WAL budget: the broker stops answering, WAL piles up, the relay lets its slot go ------
# (Back to one shard: the relay drops the two shard slots at its start.) The broker is paused
# with SIGSTOP, so sends are taken and never answered; 4 MB of other WAL passes the 1 MiB budget.
wal_budget=1MiB
start_relay
wait_for_status() {  # wait_for_status PATTERN DESCRIPTION
  local deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
    # shellcheck disable=SC2053  # a glob on purpose
    [[ "$status_text" == $1 ]] && { pass; return 0; }
    sleep 0.2
  done
  fail "$2; status said: $status_text"
  return 1
}
wait_for_status "*slot $slot: streamed*" "one shard again: slot $slot streamed" || true
if [[ "$status_text" == *"_of_2"* ]]; then
  fail "the shard slots should be gone with one shard; status said: $status_text"
else
  pass
fi
kill -STOP "$kafka_pid"
write_round 5
sql -c "CREATE TABLE $schema.filler AS SELECT repeat('x', 1000) AS x FROM generate_series(1, 4000)"
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)) && ! grep -q '"polling_fallback":true' "$work_dir/relay.out"; do
  sleep 0.2
done
if grep -q '"polling_fallback":true' "$work_dir/relay.out"; then pass; else
  kill -CONT "$kafka_pid"
  show_log "relay stderr" "$work_dir/relay.err"
  fatal "over a 1 MiB WAL budget the relay should let its slot go; stats: $(tail -n 1 "$work_dir/relay.out")"
fi
deadline=$((SECONDS + 10))  # the drop follows its walsender's exit
while ((SECONDS < deadline)); do
  status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
  [[ "$status_text" != *"slot $slot:"* ]] && break
  sleep 0.2
done
if [[ "$status_text" != *"slot $slot:"* ]]; then pass; else
  fail "the relay should drop the slot it let go; status said: $status_text"
fi
if [[ "$status_text" == *"let slot $slot go, publishes from the table"* ]]; then pass; else
  fail "status should say the relay let its slot go; it said: $status_text"
fi
write_round 6  # committed while there is no slot: the table path's
kill -CONT "$kafka_pid"
wait_published $((6 * aggregates * per_round))
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)) && ! tail -n 1 "$work_dir/relay.out" | grep -q '"polling_fallback":false'; do
  sleep 0.2
done
last_stats="$(tail -n 1 "$work_dir/relay.out")"
if [[ "$last_stats" == *'"polling_fallback":false'* && "$last_stats" == *'"slot_released":1'* ]]; then
  pass
else
  fail "caught up, the stats should say streaming again after one release: $(tail -n 1 "$work_dir/relay.out")"
fi
wait_for_status "*slot $slot: streamed*" "caught up, the relay streams again from a new slot" || true
stop_relay

# --- 7. table-less events: no rows, only the slot; refusals of what would lose them --------------
expect_failure "--table-less with a WAL budget" "cdc.table_less needs cdc.wal_budget = 0" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --table-less --wal-budget 1GiB
expect_failure "--table-less with two shards" "needs one shard" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --table-less --shards 2
expect_failure "--table-less on the polling relay" "needs the cdc source" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --table-less
# Round `round` as a table-less producer writes it: the sequences taken, the events one message
# per aggregate (the shape ProducerOptions::table_less emits), no rows.
write_round_table_less() {
  local round="$1" first last
  first=$(((round - 1) * per_round + 1))
  last=$((round * per_round))
  sql >/dev/null <<SQL
BEGIN;
SELECT $schema.outbox_table_less_ready();
INSERT INTO $schema.outbox_aggregate_sequences AS q (aggregate_type, aggregate_id, last_sequence)
SELECT 'order', 'order-' || a, $last FROM generate_series(1, $aggregates) AS a
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = EXCLUDED.last_sequence;
SELECT pg_logical_emit_message(true, 'outbox:$schema', json_build_object(
  'xid', pg_current_xact_id()::text, 'occurred_at', now()::text,
  'aggregate_type', 'order', 'aggregate_id', 'order-' || a,
  'events', (SELECT json_agg(json_build_object('event_id', gen_random_uuid(), 'sequence', s,
               'event_type', 'OrderStepped', 'schema_version', 1,
               'payload', jsonb_build_object('step', s)::text, 'headers', '{}') ORDER BY s)
             FROM generate_series($first, $last) AS s WHERE a > 0))::text)  -- per aggregate
FROM generate_series(1, $aggregates) AS a;
COMMIT;
SQL
}
if sql -c "SELECT $schema.outbox_table_less_ready()" >/dev/null 2>"$work_dir/refused.err"; then
  fail "with no table-less slot registered, outbox_table_less_ready() should refuse"
elif grep -q -- "--table-less" "$work_dir/refused.err"; then
  pass
else
  fail "the refusal should say to start a relay with --table-less: $(cat "$work_dir/refused.err")"
fi
wal_budget=0
start_relay --table-less
wait_for_status "*slot $slot: streamed*registered for table-less events*" \
  "a --table-less relay registers its slot, and status says so" || true
expect_failure "a relay without --table-less on a registered slot" "registered for table-less" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --source cdc \
  --slot "$slot"
write_round_table_less 7
want=$((aggregates * per_round))
deadline=$((SECONDS + publish_timeout_s))
while ((SECONDS < deadline)) &&
      ! tail -n 1 "$work_dir/relay.out" | grep -q "\"published\":$want[,}]"; do
  sleep 0.2
done
if tail -n 1 "$work_dir/relay.out" | grep -q "\"published\":$want[,}]"; then pass; else
  show_log "relay stderr" "$work_dir/relay.err"
  fail "the table-less relay should publish $want events; stats: $(tail -n 1 "$work_dir/relay.out")"
fi
rows_now="$(sql -c "SELECT count(*) FROM $schema.outbox_events")"
if [[ "$rows_now" == "$((6 * aggregates * per_round))" ]]; then pass; else
  fail "table-less events write no rows: $rows_now rows, expected $((6 * aggregates * per_round))"
fi
stop_relay

# --- 8. what reached Kafka, read by kcat: every event, each key's first deliveries in order ------
total=$((7 * aggregates * per_round))
if ! kcat -C -b "$brokers" -t "$topic" -e -q -f '%k %h\n' >"$work_dir/topic.txt" 2>"$work_dir/kcat.err"; then
  fail "kcat could not read $topic: $(cat "$work_dir/kcat.err")"
fi
verdict="$(python3 - "$work_dir/topic.txt" "$total" <<'PY'
import re, sys
seen, last, problems = set(), {}, []
for line in open(sys.argv[1]):
    key, _, headers = line.rstrip("\n").partition(" ")
    fields = dict(h.split("=", 1) for h in headers.split(",") if "=" in h)
    event_id, sequence = fields.get("event_id"), int(fields.get("aggregate_sequence", "0"))
    if event_id in seen:
        continue  # a repeat (at-least-once) is allowed
    seen.add(event_id)
    if sequence != last.get(key, 0) + 1:
        problems.append(f"{key}: {sequence} after {last.get(key, 0)}")
    last[key] = sequence
if len(seen) != int(sys.argv[2]):
    problems.append(f"{len(seen)} distinct events on the topic, expected {sys.argv[2]}")
print("ok" if not problems else "; ".join(problems[:5]))
PY
)"
if [[ "$verdict" == "ok" ]]; then pass; else fail "kcat read of $topic: $verdict"; fi

# --- 9. tearing CDC down: an abandoned slot reported, dropped only when nothing is lost ----------
status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
if [[ "$status_text" == *"slot $slot: not streamed"*"outbox cdc drop --slot $slot"* ]]; then pass; else
  fail "status should say a slot no relay streams keeps WAL, and how to drop it: $status_text"
fi
expect_failure "dropping a slot that is not there" "there is no replication slot nosuch" \
  "$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot nosuch
expect_failure "dropping a table-less slot without --force" "loses every one not yet published" \
  "$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot "$slot"
start_relay --table-less
wait_for_status "*slot $slot: streamed*" "the table-less relay streams again" || true
expect_failure "dropping a streamed slot" "stop the relay that streams it" \
  "$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot "$slot" --force
stop_relay
# Another tool's slot and publication: cdc drop does not take them for outbox's.
sql -c "SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')" >/dev/null
sql -c "CREATE PUBLICATION everything FOR ALL TABLES" >/dev/null
expect_failure "dropping a slot no relay of the schema is known to use" "another tool's slot" \
  "$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot debezium
out="$("$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot "$slot" --force 2>&1)" ||
  fail "cdc drop --force with another slot left failed: $out"
if [[ "$out" == *"kept the publications: slot(s) debezium are still there"* ]]; then pass; else
  fail "with another slot left, cdc drop should keep the publications: $out"
fi
sql -c "SELECT pg_drop_replication_slot('debezium')" >/dev/null
"$outbox_binary" migrate --db "$db" --schema cdcother >/dev/null
sql -c "INSERT INTO cdcother.outbox_table_less_slots (slot_name, relay_id) VALUES ('$slot', 'r')"
start_relay --table-less
wait_for_status "*slot $slot: streamed*" "a new table-less slot" || true
stop_relay
expect_failure "dropping a slot another schema registered for table-less events" \
  "registered for the table-less events of schema cdcother" \
  "$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot "$slot" --force
sql -c "DELETE FROM cdcother.outbox_table_less_slots" >/dev/null
out="$("$outbox_binary" cdc drop --db "$db" --schema "$schema" --slot "$slot" --force 2>&1)" ||
  fail "cdc drop --force failed: $out"
left="$(sql -c "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$slot') ||
  '/' || (SELECT count(*) FROM $schema.outbox_table_less_slots) || '/' ||
  (SELECT count(*) FROM pg_publication WHERE pubname LIKE '${schema}_outbox%') || '/' ||
  (SELECT count(*) FROM pg_publication WHERE pubname = 'everything')")"
if [[ "$out" == *"dropped slot $slot"*"table-less registration"*"dropped publication(s)"* && "$left" == 0/0/0/1 ]]; then
  pass
else
  fail "cdc drop --force should drop the slot, its registration and outbox's publications, not another's: $out (left: slot/registration/ours/everything $left)"
fi

summary_and_exit
