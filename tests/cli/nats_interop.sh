#!/usr/bin/env bash
# The NATS JetStream sink as an operator runs it, read back by a library no one here wrote:
# `outbox relay --sink nats` publishes 30 events over 6 aggregates (non-ASCII ids and payloads)
# to Debian's nats-server, creating the stream; nats.js 2.29.3 (tests/interop/nats_reader.js,
# the NATS maintainers' JavaScript client) reads every stored message and consumes the stream.
# Every event must be stored once, with Nats-Msg-Id = event_id = the table's id, the subject
# outbox.<type>.<partition> (Kafka's murmur2 of the aggregate id, computed in Python by
# murmur2.py), the payload and headers the table holds, each aggregate's sequence going up by one
# in stream order.
# A second relay over the same events (marks reset in the table) stores nothing new: the server
# drops the repeats by Nats-Msg-Id; `outbox audit --sink nats` reads the stream back and finds
# each event once. Also: a stream that does not exist stops the relay with what to do, and
# --nats-* flags with another sink are refused.
#
# Usage: nats_interop.sh /path/to/outbox /path/to/source_dir
# Needs: psql, python3, node, npm, nats-server (scripts/install-deps.sh).
set -euo pipefail

readonly outbox_binary="${1:?usage: nats_interop.sh /path/to/outbox /path/to/source_dir}"
readonly source_dir="${2:?usage: nats_interop.sh /path/to/outbox /path/to/source_dir}"
readonly schema=shop
readonly publish_timeout_s=60
readonly interop_dir="$source_dir/tests/interop"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init nats_interop outbox-nats-interop-test

for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 ||
    fatal "$tool not found: this test runs the npm package nats under node (scripts/install-deps.sh)"
done
npm ci --prefix "$interop_dir" --no-audit --no-fund --loglevel=error >"$work_dir/npm.log" 2>&1 ||
  fatal --log "$work_dir/npm.log" "npm ci in $interop_dir failed (it needs the npm registry or npm's cache)"

start_postgres
start_nats
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
pending() { sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL"; }

# run_relay NAME [FLAG...]: `outbox relay --sink nats` until nothing is pending, then SIGTERM.
run_relay() {
  local name="$1"
  shift
  relay_until_published "$name" --sink nats --nats-servers "$nats_url" --nats-stream SHOP \
    --nats-subject-template 'outbox.{aggregate_type}.{partition}' --nats-partitions 4 \
    --stats-format json "$@"
}

# --- 1. refusals before anything is sent -----------------------------------------------------------
expect_failure "--nats-* with the Kafka sink" "the --nats-* flags are for --sink nats" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink kafka --kafka-brokers 127.0.0.1:1 \
  --nats-stream SHOP
expect_failure "an aggregate id in the subject" "{aggregate_id} is not allowed" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink nats --nats-servers "$nats_url" \
  --nats-subject-template 'outbox.{aggregate_id}'

# --- 2. 30 events over 6 aggregates; a stream that does not exist stops the relay ----------------
lines="$(python3 - <<'PY'
import json
aggregates = [("order", "o-1"), ("customer", "c-1"), ("order", "o.2 with dots*>"),
              ("customer", "c-Zo\u00eb \U0001F642"), ("order", "o-\u00fc-3"), ("customer", "\u9867\u5ba2-7")]
for step in range(1, 6):
    for aggregate_type, aggregate_id in aggregates:
        row = {"aggregate_type": aggregate_type, "aggregate_id": aggregate_id,
               "event_type": f"{aggregate_type.capitalize()}Step{step}",
               "payload": {"step": step, "note": "caf\u00e9 \u2603"}}
        if step == 4:
            row["headers"] = {"tenant": "acme", "Nats-Expected-Stream": "ELSEWHERE"}
        print(json.dumps(row))
PY
)"
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue.out" \
  2>&1 <<<"$lines" || fatal --log "$work_dir/enqueue.out" "outbox enqueue --stdin failed"

rc=0
timeout 30 "$outbox_binary" relay --db "$db" --schema "$schema" --sink nats \
  --nats-servers "$nats_url" --nats-stream SHOP >"$work_dir/missing.out" 2>&1 || rc=$?
if ((rc != 0)) && grep -q "NATS stream SHOP does not exist" "$work_dir/missing.out" &&
  grep -q -- "--nats-create-stream" "$work_dir/missing.out"; then
  pass
else
  show_log "relay without a stream" "$work_dir/missing.out"
  fail "a relay to a missing stream should stop (exit $rc) saying how to create it"
fi
if [[ "$(pending)" == 30 ]]; then pass; else fail "nothing should be marked published without a stream"; fi

# --- 3. published, read back by nats.js ----------------------------------------------------------
run_relay relay --nats-create-stream --nats-cloudevents-source /shop
node "$interop_dir/nats_reader.js" "$nats_url" SHOP 60 >"$work_dir/reader.jsonl" \
  2>"$work_dir/reader.err" || { show_log reader "$work_dir/reader.err"; fail "nats.js reader failed"; }
sql -c "SELECT json_build_object('id', event_id, 'type', event_type, 'aggregate_type', aggregate_type,
    'aggregate_id', aggregate_id, 'sequence', aggregate_sequence::text, 'payload', payload::text,
    'headers', headers) FROM $schema.outbox_events" >"$work_dir/expected.jsonl"

check_stream() {
  PYTHONPATH="$cli_dir" python3 - "$work_dir/expected.jsonl" "$work_dir/reader.jsonl" <<'PY'
import json, sys
from murmur2 import partition  # tests/cli/murmur2.py: Kafka's partitioner
expected = {e["id"]: e for e in map(json.loads, open(sys.argv[1]))}
lines = [json.loads(l) for l in open(sys.argv[2])]
summary = [l for l in lines if l.get("summary")]
got = [l for l in lines if not l.get("summary")]
def verdict(name, problems):
    print(f"{name}: ok" if not problems else f"{name}: {problems[:5]}")
s = summary[-1] if summary else {}
verdict("nats.js stored and consumed every message, in stream order",
        [] if (s.get("stored"), s.get("consumed"), s.get("consumed_in_stream_order")) == (30, 30, True) else [s])
ids = [g["headers"].get("Nats-Msg-Id") for g in got]
verdict("every event stored once, Nats-Msg-Id = event_id = the table's id",
        sorted(set(expected) - set(ids)) + [i for i in set(ids) if ids.count(i) != 1] +
        [g["seq"] for g in got if g["headers"].get("event_id") != g["headers"].get("Nats-Msg-Id")])
problems, last = [], {}
for g in got:
    e = expected.get(g["headers"].get("event_id"), {})
    h = g["headers"]
    want_subject = f'outbox.{e.get("aggregate_type")}.{partition(e.get("aggregate_id", ""), 4)}'
    checks = {"subject": (g["subject"], want_subject),
              "payload": (json.loads(g["data"]), json.loads(e.get("payload", "null"))),
              "aggregate_id": (h.get("aggregate_id"), e.get("aggregate_id")),
              "aggregate_sequence": (h.get("aggregate_sequence"), e.get("sequence")),
              "event_type": (h.get("event_type"), e.get("type")),
              "ce-id": (h.get("ce-id"), e.get("id")), "ce-source": (h.get("ce-source"), "/shop"),
              "ce-subject": (h.get("ce-subject"), e.get("aggregate_id")),
              "tenant": (h.get("tenant"), (e.get("headers") or {}).get("tenant")),
              "Nats-Expected-Stream": (h.get("Nats-Expected-Stream"), "SHOP")}
    problems += [f'seq {g["seq"]} {k}: read {a!r}, want {b!r}' for k, (a, b) in checks.items() if a != b]
    key = (e.get("aggregate_type"), e.get("aggregate_id"))
    if int(h.get("aggregate_sequence", 0)) != last.get(key, 0) + 1:
        problems.append(f'seq {g["seq"]}: {key} sequence {h.get("aggregate_sequence")} after {last.get(key, 0)}')
    last[key] = int(h.get("aggregate_sequence", 0))
verdict("subject, payload and headers are the table's; each aggregate in order", problems)
PY
}
verdicts="$(check_stream)" || fail "the comparison script failed"
while IFS= read -r line; do
  case "$line" in
    *": ok") pass ;;
    *) fail "$line" ;;
  esac
done <<<"$verdicts"

# --- 4. the same events again: the server drops every repeat by Nats-Msg-Id ----------------------
sql -c "UPDATE $schema.outbox_events SET published_at = NULL" >/dev/null
run_relay again
dupes="$(grep -o '"nats_duplicates":[0-9]*' "$work_dir/again.out" | tail -1 | cut -d: -f2 || true)"
node "$interop_dir/nats_reader.js" "$nats_url" SHOP 60 >"$work_dir/reader.jsonl" 2>"$work_dir/reader.err" ||
  fail "nats.js reader failed the second time"
stored="$(grep -o '"stored":[0-9]*' "$work_dir/reader.jsonl" | cut -d: -f2)"
if [[ "$stored" == 30 ]]; then pass; else fail "a second publish of the 30 events should store nothing new; the stream holds $stored"; fi
echo "repeats the server dropped, as the relay counted them: ${dupes:-?}"

# --- 5. outbox audit --sink nats: the stream read back by time, without consuming ---------------
rc=0
"$outbox_binary" audit --db "$db" --schema "$schema" --sink nats --nats-servers "$nats_url" \
  --nats-stream SHOP --since 1h --json >"$work_dir/audit.json" 2>"$work_dir/audit.err" || rc=$?
verdict="$(python3 - "$work_dir/audit.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
want = {"stream": "SHOP", "rows": 30, "published": 30, "messages": 30, "lost": [], "phantom": [],
        "duplicated": [], "ok": True}
print("ok" if all(a.get(k) == v for k, v in want.items()) else {k: a.get(k) for k in want})
PY
)" || verdict="unreadable"
if ((rc == 0)) && [[ "$verdict" == ok ]]; then
  pass
else
  show_log "audit stderr" "$work_dir/audit.err"
  fail "outbox audit --sink nats should find the 30 events once each (exit $rc): $verdict"
fi
expect_failure "audit of a stream that does not exist" "does not exist" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --sink nats --nats-servers "$nats_url" \
  --nats-stream NOPE --since 1h

summary_and_exit
