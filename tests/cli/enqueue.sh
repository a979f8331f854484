#!/usr/bin/env bash
# Events without C++: psql calls <schema>.enqueue() as any language's driver would, `outbox
# enqueue` writes one event from flags and many from JSON lines on stdin (all or none: a bad line
# anywhere writes nothing), its refusals say what is wrong, what is stored is what was written, and
# a relay publishes what both made: kcat reads each event off Kafka with its key, outbox's headers
# and the payload, and so does `outbox tail` (text, --json, -n), escaping what a terminal acts on.
#
# Usage: enqueue.sh /path/to/outbox
# Needs: psql and kcat on PATH, PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: enqueue.sh /path/to/outbox}"
readonly schema=shop
readonly publish_timeout_s=60

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init enqueue outbox-enqueue-test

start_postgres
start_kafka_mock
events() { sql -c "SELECT count(*) FROM $schema.outbox_events"; }
enqueue() { "$outbox_binary" enqueue --db "$db" --schema "$schema" "$@"; }

expect_failure "enqueue before migrate" "run \`outbox migrate\`" \
  enqueue --aggregate-type order --aggregate-id o-1 --event-type OrderPlaced
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"

# --- 1. psql, as any language's driver: the business change and the event in one transaction ----
sql -c "CREATE TABLE $schema.orders (id text PRIMARY KEY, total int)"
row="$(sql <<SQL
BEGIN;
INSERT INTO $schema.orders VALUES ('o-1', 42);
SELECT aggregate_sequence FROM $schema.enqueue('order', 'o-1', 'OrderPlaced', '{"total": 42}');
COMMIT;
SQL
)"
if [[ "$row" == "1" ]]; then pass; else fail "psql's enqueue() should return sequence 1, got: $row"; fi
sql -c "BEGIN; SELECT $schema.enqueue('order', 'o-1', 'Lost', '{}'); ROLLBACK;" >/dev/null
if [[ "$(events)" == 1 ]]; then pass; else fail "a rolled-back enqueue() left a row"; fi

# --- 2. one event from flags: the next sequence (the rollback left no gap) -----------------------
out="$(enqueue --aggregate-type order --aggregate-id o-1 --event-type OrderPaid \
  --payload '{"amount": 42}' --headers '{"tenant": "acme"}' 2>&1)" || fail "enqueue failed: $out"
if [[ "$out" =~ ^enqueued\ OrderPaid\ of\ order\ o-1:\ sequence\ 2,\ event\ [0-9a-f]{8}-[0-9a-f]{4}-7 ]]; then
  pass
else
  fail "enqueue should print the event with sequence 2 and a UUIDv7: $out"
fi

# --- 3. JSON lines on stdin, one transaction, --json answers ------------------------------------
out="$(enqueue --stdin --json 2>&1 <<'LINES'
{"aggregate_type": "order", "aggregate_id": "o-1", "event_type": "OrderShipped", "payload": {"carrier": "dhl"}}

{"aggregate_type": "order", "aggregate_id": "o-2", "event_type": "OrderPlaced", "payload": {"total": 7}, "headers": {"tenant": "acme"}, "schema_version": 2}
{"aggregate_type": "order", "aggregate_id": "o-2", "event_type": "OrderPaid", "payload": {}, "event_id": "0190a7a4-7d3e-7c3a-8c3e-1234567890ab"}
LINES
)" || fail "enqueue --stdin failed: $out"
if [[ "$(wc -l <<<"$out")" == 3 && "$out" == *'"aggregate_id":"o-1","aggregate_sequence":3'* &&
      "$out" == *'"aggregate_id":"o-2","aggregate_sequence":1'* &&
      "$out" == *'"aggregate_sequence":2,"aggregate_type":"order","event_id":"0190a7a4-7d3e-7c3a-8c3e-1234567890ab"'* ]]; then
  pass
else
  fail "enqueue --stdin --json should answer one line per event with its sequence: $out"
fi
if [[ "$(sql -c "SELECT schema_version::text || (headers->>'tenant') FROM $schema.outbox_events
  WHERE aggregate_id = 'o-2' AND aggregate_sequence = 1")" == "2acme" ]]; then
  pass
else
  fail "a line's schema_version and headers should be stored"
fi

# --- 4. refusals: what is wrong, where, and nothing written -------------------------------------
before="$(events)"
expect_failure "a line the function refuses (blank lines counted)" "line 4: outbox: event_type is empty" \
  enqueue --stdin <<'LINES'
{"aggregate_type": "order", "aggregate_id": "o-3", "event_type": "A", "payload": {}}


{"aggregate_type": "order", "aggregate_id": "o-3", "event_type": "", "payload": {}}
LINES
expect_failure "a name holding NUL, refused rather than cut short" "line 1:" \
  enqueue --stdin <<<'{"aggregate_type": "order", "aggregate_id": "o-3\u0000evil", "event_type": "A", "payload": {}}'
expect_failure "a line that is not JSON" "line 2: not a JSON object" \
  enqueue --stdin <<'LINES'
{"aggregate_type": "order", "aggregate_id": "o-3", "event_type": "A", "payload": {}}
{"aggregate_type": "order",
LINES
expect_failure "an unknown key" 'unknown key "paylod"' \
  enqueue --stdin <<<'{"aggregate_type": "order", "aggregate_id": "o-3", "event_type": "A", "paylod": {}}'
printf '{"aggregate_type": "order", "aggregate_id": "o-3", "event_type": "A", "payload": {"x": "%s"}}\n' \
  "$(head -c 1000000 /dev/zero | tr '\0' x)" >"$work_dir/large.jsonl"
expect_failure "a payload over the limit" "would be a message of" \
  enqueue --stdin <"$work_dir/large.jsonl"
expect_failure "a reserved header" 'uses the reserved name "event_id"' \
  enqueue --aggregate-type order --aggregate-id o-3 --event-type A --headers '{"event_id": "x"}'
expect_failure "payload that is not JSON" "invalid input syntax for type json" \
  enqueue --aggregate-type order --aggregate-id o-3 --event-type A --payload '{oops'
expect_failure "--stdin with event flags" "leave out --aggregate-type" \
  enqueue --stdin --aggregate-type order </dev/null
expect_failure "no event at all" "say which event" enqueue
out="$(enqueue --aggregate-type order --aggregate-id "$(printf 'o-\033[31mred')" --event-type A 2>&1)" &&
  fail "an aggregate id with an escape sequence was taken"
if [[ "$out" == *"contains the control character U+001B at byte 2"* && "$out" != *$'\033'* ]]; then
  pass
else
  fail "an escape sequence should be refused and not echoed: $(printf '%q' "$out")"
fi
if [[ "$(events)" == "$before" ]]; then pass; else
  fail "refused calls wrote rows: $(events) events, $before before"
fi

# --- 5. what is stored is what was written: numbers exactly, UTF-8 whatever the client's --------
enqueue --stdin >/dev/null <<'LINES' || fail "enqueue of exact numbers failed"
{"aggregate_type": "ledger", "aggregate_id": "l-1", "event_type": "Booked", "payload": {"amount": 19.990, "big": 123456789012345678901234567890, "tiny": 1e-400}}
LINES
stored="$(sql -c "SELECT payload::text FROM $schema.outbox_events WHERE aggregate_id = 'l-1'")"
if [[ "$stored" == *'"amount": 19.990'* && "$stored" == *'"big": 123456789012345678901234567890'* &&
      "$stored" == *'"tiny": 0.000'*'0001'* ]]; then
  pass
else
  fail "a line's numbers should be stored as written, not through a double: $stored"
fi
PGCLIENTENCODING=LATIN1 enqueue --aggregate-type ledger --aggregate-id "caf$(printf '\303\251')" \
  --event-type Booked >/dev/null || fail "enqueue with PGCLIENTENCODING=LATIN1 failed"
if [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE aggregate_id = 'caf$(printf '\303\251')'")" == 1 ]]; then
  pass
else
  fail "a UTF-8 id written under PGCLIENTENCODING=LATIN1 should be stored as given"
fi

# Status for a person: an age in units, and each JSON line with its time.
sql -c "UPDATE $schema.outbox_events SET occurred_at = now() - interval '2 hours 5 minutes',
  available_at = now() - interval '2 hours 5 minutes' WHERE aggregate_id = 'o-1' AND aggregate_sequence = 1"
status_text="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)"
if [[ "$status_text" == *"oldest pending 2h5m"* ]]; then pass; else
  fail "status should give the oldest pending age in units: $status_text"
fi
status_json="$("$outbox_binary" status --db "$db" --schema "$schema" --json 2>&1)"
if [[ "$status_json" =~ \"at\":\"20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z\" ]]; then pass; else
  fail "status --json should say when it was read: $status_json"
fi

# --- 6. a relay publishes what SQL made: kcat reads key, headers and payload --------------------
"$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  >"$work_dir/relay.out" 2>"$work_dir/relay.err" &
relay_pid=$!
track_background "$relay_pid" "relay"
deadline=$((SECONDS + publish_timeout_s))
while ((SECONDS < deadline)) &&
  [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL")" != 0 ]]; do
  sleep 0.2
done
kill -TERM "$relay_pid"
wait "$relay_pid" || fail "the relay should exit 0 after SIGTERM"
kcat -C -b "$brokers" -t outbox.order -e -q -f '%k|%h|%s\n' >"$work_dir/topic.txt" \
  2>"$work_dir/kcat.err" || fail "kcat could not read outbox.order: $(cat "$work_dir/kcat.err")"
if [[ "$(wc -l <"$work_dir/topic.txt")" == 5 ]] &&
   grep -q '^o-1|.*event_type=OrderPlaced.*aggregate_sequence=1.*|{"total": 42}$' "$work_dir/topic.txt" &&
   grep -q '^o-1|.*event_type=OrderPaid.*aggregate_sequence=2.*tenant=acme|{"amount": 42}$' "$work_dir/topic.txt" &&
   grep -q '^o-2|.*event_id=0190a7a4-7d3e-7c3a-8c3e-1234567890ab.*aggregate_sequence=2' "$work_dir/topic.txt"; then
  pass
else
  show_log "relay stderr" "$work_dir/relay.err"
  fail "kcat should read the 5 events with their keys, headers and payloads: $(cat "$work_dir/topic.txt")"
fi

# --- 7. outbox tail: the same, for a person; and what another producer put there, escaped -------
tail_out="$("$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.order --from-beginning 2>&1)" ||
  fail "outbox tail failed: $tail_out"
if [[ "$(grep -c ' key o-' <<<"$tail_out")" == 5 && "$tail_out" == *'event_type=OrderPaid'*'tenant=acme'* &&
      "$tail_out" == *'{"total": 42}'* ]]; then
  pass
else
  fail "outbox tail --from-beginning should show the 5 events with keys, headers and payloads: $tail_out"
fi
verdict="$("$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.order --from-beginning --json |
  python3 -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin]
ok = len(rows) == 5 and all(isinstance(r["payload"], dict) and r["headers"]["aggregate_type"] == "order" for r in rows)
print("ok" if ok else rows)')"
if [[ "$verdict" == ok ]]; then pass; else fail "outbox tail --json: $verdict"; fi
# -n 1: the last message of each partition that holds any, and no other.
"$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.order --from-beginning --json \
  >"$work_dir/all.jsonl" || fail "tail --json failed"
"$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.order -n 1 >"$work_dir/last.txt" ||
  fail "tail -n 1 failed"
verdict="$(python3 - "$work_dir/all.jsonl" "$work_dir/last.txt" <<'PY'
import json, re, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    last[r["partition"]] = max(last.get(r["partition"], -1), r["offset"])
shown = {(int(p), int(o)) for p, o in re.findall(r"^\[(\d+)\] @(\d+) key", open(sys.argv[2]).read(), re.M)}
print("ok" if shown == set(last.items()) else f"shown {sorted(shown)}, last of each {sorted(last.items())}")
PY
)"
if [[ "$verdict" == ok ]]; then pass; else fail "outbox tail -n 1: $verdict"; fi
# --follow: what comes after it started, as it comes (a pipe's reader sees each line).
"$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.order -n 0 --follow \
  >"$work_dir/follow.out" 2>&1 &
follow_pid=$!
track_background "$follow_pid" "outbox tail --follow"
sleep 1
printf 'later|{"late": true}\n' | kcat -P -b "$brokers" -t outbox.order -K '|' 2>/dev/null
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)) && ! grep -q 'key later' "$work_dir/follow.out"; do sleep 0.2; done
kill -INT "$follow_pid"
wait "$follow_pid" || true
if grep -q 'key later' "$work_dir/follow.out" && grep -q '{"late": true}' "$work_dir/follow.out" &&
   [[ "$(grep -c ' key ' "$work_dir/follow.out")" == 1 ]]; then
  pass
else
  fail "outbox tail -n 0 --follow should print the one message produced after it started: $(cat "$work_dir/follow.out")"
fi
printf 'k\033]0;x\a|pay\033[31mload\n' | kcat -P -b "$brokers" -t outbox.order -K '|' 2>/dev/null ||
  fail "kcat could not produce the hostile message"
tail_out="$("$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.order --from-beginning 2>&1)" || true
if [[ "$tail_out" == *'key k\x1b]0;x\x07'* && "$tail_out" == *'pay\x1b[31mload'* && "$tail_out" != *$'\033'* ]]; then
  pass
else
  fail "outbox tail should escape what a terminal acts on: $(printf '%q' "$tail_out")"
fi
expect_failure "tail of a topic that is not there" "no topic outbox.nothing" \
  "$outbox_binary" tail --kafka-brokers "$brokers" --topic outbox.nothing

summary_and_exit
