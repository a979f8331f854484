#!/usr/bin/env bash
# The Redis Streams sink as an operator runs it, read back by a library no one here wrote:
# `outbox relay --sink redis` appends 30 events over 6 aggregates (non-ASCII ids and payloads,
# bare JSON scalars, headers named like entry fields) to the streams
# outbox:{aggregate_type}:{partition} of Debian's redis-server (durable: appendonly yes,
# appendfsync always). ioredis 6.1.0 (tests/interop/redis_reader.js, the Node.js client, no
# hiredis) finds the streams by SCAN and reads them with XRANGE. Every event must be there once,
# with event_id = the table's id, in the stream whose {partition} is Kafka's murmur2 of the
# aggregate id (computed in Python by murmur2.py), with the table's fields, headers a JSON object
# equal to the table's, the payload that was enqueued, each aggregate's aggregate_sequence going
# up by one in stream order. A consumer group of ioredis's (XREADGROUP, XACK) reads each entry
# once and leaves nothing pending; `outbox audit --sink redis` finds each event once. `outbox
# replay` of every event within the dedup window, published by a second relay: the server-side
# script appends none of them again (the streams do not grow, the group reads nothing new, the
# relay counts redis_duplicates). Also: a server that does not fsync each write stops the relay
# with what to set; --redis-* flags with another sink, an aggregate id in the stream name and
# rediss:// are refused; the default flags are accepted.
#
# Usage: redis_interop.sh /path/to/outbox /path/to/source_dir
# Needs: psql, python3, node, npm, redis-server and redis-cli (scripts/install-deps.sh).
set -euo pipefail

readonly outbox_binary="${1:?usage: redis_interop.sh /path/to/outbox /path/to/source_dir}"
readonly source_dir="${2:?usage: redis_interop.sh /path/to/outbox /path/to/source_dir}"
readonly schema=shop
readonly publish_timeout_s=60
readonly interop_dir="$source_dir/tests/interop"
readonly template='outbox:{aggregate_type}:{partition}'
readonly group=shop-projection

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init redis_interop outbox-redis-interop-test

for tool in node npm redis-cli; do
  command -v "$tool" >/dev/null 2>&1 ||
    fatal "$tool not found: this test runs the npm package ioredis under node, and redis-cli (scripts/install-deps.sh)"
done
npm ci --prefix "$interop_dir" --no-audit --no-fund --loglevel=error >"$work_dir/npm.log" 2>&1 ||
  fatal --log "$work_dir/npm.log" "npm ci in $interop_dir failed (it needs the npm registry or npm's cache)"

start_postgres
start_redis
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
pending() { sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL"; }

# What every relay here shares. The dedup window must cover the relay's longest retry,
# max(--lease-ms, --backoff-max-ms) + --redis-reply-timeout: 5 min 5 s with the default flags,
# hence 10m here (section 1 checks that the default flags are accepted on their own).
relay_flags=(--sink redis --redis-url "$redis_url" --redis-partitions 4
  --redis-dedup-window 10m --stats-format json)

# run_relay NAME [FLAG...]: `outbox relay --sink redis` until nothing is pending, then SIGTERM.
run_relay() {
  local name="$1"
  shift
  relay_until_published "$name" "${relay_flags[@]}" "$@"
}

# read_streams OUT: ioredis's XRANGE of every stream the template names, as JSON lines in OUT.
read_streams() {
  node "$interop_dir/redis_reader.js" range "$redis_url" "$template" 60 \
    >"$work_dir/$1" 2>"$work_dir/$1.err" ||
    { show_log "ioredis range reader" "$work_dir/$1.err"; fail "ioredis XRANGE reader failed"; }
}

# read_group OUT: ioredis reads the streams as consumer group $group (XREADGROUP, XACK).
read_group() {
  node "$interop_dir/redis_reader.js" group "$redis_url" "$template" 60 "$group" \
    >"$work_dir/$1" 2>"$work_dir/$1.err" ||
    { show_log "ioredis group reader" "$work_dir/$1.err"; fail "ioredis consumer group reader failed"; }
}

# tally: a pass for each "NAME: ok" line on stdin, a failure for each other line.
tally() {
  local line
  while IFS= read -r line; do
    case "$line" in
      *": ok") pass ;;
      *) fail "$line" ;;
    esac
  done
}

# audit_ok WHEN: `outbox audit --sink redis` over the last hour finds the 30 events once each.
audit_ok() {
  local rc=0 verdict
  "$outbox_binary" audit --db "$db" --schema "$schema" --sink redis --redis-url "$redis_url" \
    --redis-stream-template "$template" --since 1h --json >"$work_dir/audit.json" \
    2>"$work_dir/audit.err" || rc=$?
  verdict="$(python3 - "$work_dir/audit.json" "$template" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
want = {"streams": sys.argv[2], "rows": 30, "published": 30, "pending": 0, "messages": 30,
        "foreign_messages": 0, "lost": [], "phantom": [], "duplicated": [], "ok": True}
print("ok" if all(a.get(k) == v for k, v in want.items()) else {k: a.get(k) for k in want})
PY
)" || verdict="unreadable"
  if ((rc == 0)) && [[ "$verdict" == ok ]]; then
    pass
  else
    show_log "audit stderr" "$work_dir/audit.err"
    fail "outbox audit --sink redis $1 should find the 30 events once each (exit $rc): $verdict"
  fi
}

# --- 1. refusals before anything is sent; the default flags are accepted ---------------------------
expect_failure "--redis-* with the Kafka sink" "the --redis-* flags are for --sink redis" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink kafka --kafka-brokers 127.0.0.1:1 \
  --redis-partitions 4
expect_failure "an aggregate id in the stream name" "{aggregate_id} is not allowed" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink redis --redis-url "$redis_url" \
  --redis-stream-template 'outbox:{aggregate_id}'
expect_failure "rediss://" "rediss:// (TLS) is not supported" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink redis --redis-url rediss://x/
# `outbox relay --sink redis --redis-url URL` and nothing else must start. Nothing is pending yet,
# so it sends nothing: it runs until timeout(1) stops it (124), or exits 0.
rc=0
timeout 3 "$outbox_binary" relay --db "$db" --schema "$schema" --sink redis \
  --redis-url "$redis_url" >"$work_dir/defaults.out" 2>&1 || rc=$?
if ((rc == 0 || rc == 124)) && ! grep -q "^outbox: " "$work_dir/defaults.out"; then
  pass
else
  fail "a relay with the default --redis-* flags should start (exit $rc): $(cat "$work_dir/defaults.out")"
fi

# --- 2. 30 events over 6 aggregates; a server that does not fsync each write stops the relay ------
lines="$(python3 - <<'PY'
import json
aggregates = [("order", "o-1"), ("customer", "c-1"), ("order", "o.2 with dots*>"),
              ("customer", "c-Zo\u00eb \U0001F642"), ("order", "o-\u00fc-3"), ("customer", "\u9867\u5ba2-7")]
for step in range(1, 6):
    for n, (aggregate_type, aggregate_id) in enumerate(aggregates):
        payload = {"step": step, "note": "caf\u00e9 \u2603", "id": aggregate_id}
        if step == 5:  # bare JSON scalars: a string, a number, null
            payload = ["caf\u00e9 \u2603 \U0001F642", 5.5, None][n % 3]
        row = {"aggregate_type": aggregate_type, "aggregate_id": aggregate_id,
               "event_type": f"{aggregate_type.capitalize()}Step{step}", "payload": payload}
        if step == 4:  # named like entry fields: they stay inside the headers field's JSON
            row["headers"] = {"tenant": "acme", "payload": "{}", "occurred_at": "yesterday",
                              "headers": "none"}
        print(json.dumps(row))
PY
)"
printf '%s\n' "$lines" >"$work_dir/enqueued.jsonl"
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue.out" \
  2>&1 <<<"$lines" || fatal --log "$work_dir/enqueue.out" "outbox enqueue --stdin failed"

redis-cli -u "$redis_url" CONFIG SET appendfsync everysec >/dev/null ||
  fatal "redis-cli CONFIG SET appendfsync everysec failed"
rc=0
timeout 30 "$outbox_binary" relay --db "$db" --schema "$schema" "${relay_flags[@]}" \
  >"$work_dir/volatile.out" 2>&1 || rc=$?
if ((rc != 0)) && grep -q "appendfsync always" "$work_dir/volatile.out" &&
  grep -q -- "--redis-allow-volatile-acks" "$work_dir/volatile.out"; then
  pass
else
  show_log "relay to a server with appendfsync everysec" "$work_dir/volatile.out"
  fail "a relay to a server that does not fsync each write should stop (exit $rc) saying what to set"
fi
if [[ "$(pending)" == 30 ]]; then pass; else fail "nothing should be marked published on a volatile server"; fi
redis-cli -u "$redis_url" CONFIG SET appendfsync always >/dev/null ||
  fatal "redis-cli CONFIG SET appendfsync always failed"

# --- 3. published, read back by ioredis (XRANGE) ---------------------------------------------------
run_relay relay
read_streams range.jsonl
sql -c "SELECT json_build_object('id', event_id, 'type', event_type, 'aggregate_type', aggregate_type,
    'aggregate_id', aggregate_id, 'sequence', aggregate_sequence::text,
    'schema_version', schema_version::text, 'occurred_at', extract(epoch FROM occurred_at)::text,
    'payload', payload::text, 'headers', headers) FROM $schema.outbox_events" >"$work_dir/expected.jsonl"

check_streams() {
  PYTHONPATH="$cli_dir" python3 - "$work_dir/expected.jsonl" "$work_dir/enqueued.jsonl" \
    "$work_dir/range.jsonl" <<'PY'
import json, sys
from datetime import datetime
from decimal import Decimal
from murmur2 import partition  # tests/cli/murmur2.py: Kafka's partitioner
expected = {e["id"]: e for e in map(json.loads, open(sys.argv[1]))}
enqueued = {(r["aggregate_id"], r["event_type"]): r for r in map(json.loads, open(sys.argv[2]))}
lines = [json.loads(l) for l in open(sys.argv[3])]
summary = [l for l in lines if l.get("summary")]
got = [l for l in lines if not l.get("summary")]
def verdict(name, problems):
    print(f"{name}: ok" if not problems else f"{name}: {problems[:5]}")
s = summary[-1] if summary else {}
lengths = s.get("streams", {})
verdict("ioredis read 30 entries; the streams' XLEN add up to 30",
        [] if (s.get("entries"), sum(lengths.values()), len(got)) == (30, 30, 30) else [s])
verdict("every other key the pattern matches is a stream's dedup set",
        [k for k in s.get("other_keys", []) if not (k.endswith(":outbox-dedup") and
                                                     k[:-len(":outbox-dedup")] in lengths)])
ids = [g["fields"].get("event_id") for g in got]
verdict("every event once, event_id = the table's id",
        sorted(set(expected) - set(ids)) + sorted(set(ids) - set(expected)) +
        [i for i in set(ids) if ids.count(i) != 1])
fields = {"event_id", "aggregate_type", "aggregate_id", "aggregate_sequence", "event_type",
          "schema_version", "occurred_at", "headers", "payload"}
problems, last = [], {}
for g in got:
    f, where = g["fields"], f'{g["stream"]} {g["id"]}'
    e = expected.get(f.get("event_id"), {})
    r = enqueued.get((e.get("aggregate_id"), e.get("type")), {})
    stream_type, _, stream_partition = g["stream"].removeprefix("outbox:").rpartition(":")
    try:
        headers = json.loads(f.get("headers", ""))
    except ValueError as error:
        headers = f"not JSON: {error}"
    try:  # PostgreSQL's text of a timestamptz: the same instant to the microsecond
        occurred = Decimal(str(datetime.fromisoformat(f.get("occurred_at", "")).timestamp()))
        occurred = occurred.quantize(Decimal("1e-6"))
    except ValueError as error:
        occurred = f"not ISO 8601: {error}"
    checks = {"field names": (sorted(g["field_names"]), sorted(fields)),
              "stream name's aggregate type": (stream_type, e.get("aggregate_type")),
              "stream name's partition": (stream_partition,
                                          str(partition(e.get("aggregate_id", ""), 4))),
              "aggregate_type": (f.get("aggregate_type"), e.get("aggregate_type")),
              "aggregate_id": (f.get("aggregate_id"), e.get("aggregate_id")),
              "aggregate_sequence": (f.get("aggregate_sequence"), e.get("sequence")),
              "event_type": (f.get("event_type"), e.get("type")),
              "schema_version": (f.get("schema_version"), e.get("schema_version")),
              "occurred_at": (occurred, Decimal(e.get("occurred_at", "0")).quantize(Decimal("1e-6"))),
              "headers": (headers, e.get("headers") or {}),
              "headers as enqueued": (isinstance(headers, dict) and
                                      all(headers.get(k) == v for k, v in r.get("headers", {}).items()), True),
              "payload as enqueued": (json.loads(f.get("payload", "")) if "payload" in f else "absent",
                                      r.get("payload", "no such enqueued event")),
              "payload as the table holds it": (json.loads(f.get("payload", "null")),
                                                json.loads(e.get("payload", "null")))}
    problems += [f'{where} {k}: read {a!r}, want {b!r}' for k, (a, b) in checks.items() if a != b]
    key = (e.get("aggregate_type"), e.get("aggregate_id"))
    sequence = int(f.get("aggregate_sequence", "0")) if f.get("aggregate_sequence", "").isdigit() else 0
    if sequence != last.get(key, 0) + 1:
        problems.append(f'{where}: {key} sequence {sequence} after {last.get(key, 0)}')
    last[key] = sequence
verdict("stream per murmur2 partition; fields, headers and payload the table's; each aggregate in order",
        problems)
PY
}
verdicts="$(check_streams)" || fail "the comparison script failed"
tally <<<"$verdicts"

# --- 4. a consumer group of ioredis's reads every entry once ---------------------------------------
read_group group.jsonl
# check_group FILE COUNT: the group reader's FILE holds COUNT entries, each stream's in the order of
# the XRANGE read, and leaves nothing pending.
check_group() {
  python3 - "$work_dir/range.jsonl" "$work_dir/$1" "$2" <<'PY'
import json, sys
ranged = [json.loads(l) for l in open(sys.argv[1])]
lines = [json.loads(l) for l in open(sys.argv[2])]
want_read = int(sys.argv[3])
s = ([l for l in lines if l.get("summary")] or [{}])[-1]
got = [l for l in lines if not l.get("summary")]
def verdict(name, problems):
    print(f"{name}: ok" if not problems else f"{name}: {problems[:5]}")
streams = {r["stream"] for r in ranged if not r.get("summary")}
verdict(f"XREADGROUP read {want_read} entries, XACK took them all; nothing pending, no lag",
        [] if (s.get("read"), s.get("acked"), len(got)) == (want_read, want_read, want_read) and
              set(s.get("pending", {})) == streams and not any(s["pending"].values()) and
              set(s.get("lag", {})) == streams and not any(s["lag"].values()) else [s])
if want_read:
    order = lambda entries: {st: [(e["id"], e.get("event_id", e.get("fields", {}).get("event_id")))
                                  for e in entries if e["stream"] == st] for st in streams}
    verdict("the group read each stream's entries once, in stream order",
            [] if order(got) == order([r for r in ranged if not r.get("summary")]) else
            [order(got)])
PY
}
verdicts="$(check_group group.jsonl 30)" || fail "the group comparison script failed"
tally <<<"$verdicts"

# --- 5. outbox audit --sink redis: the streams read back by range ----------------------------------
audit_ok "after the relay"
expect_failure "audit of a template that names no stream" "audit: LOSS" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --sink redis --redis-url "$redis_url" \
  --redis-stream-template 'nowhere:{aggregate_type}:{partition}' --since 1h

# --- 6. outbox replay within the dedup window: the server-side script appends nothing again -------
rc=0
output="$("$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --wait 0 \
  --reason "redis interop: a replay within the dedup window" --actor redis-interop 2>&1)" || rc=$?
if ((rc == 0)) && [[ "$output" == *"30 event(s) pending again"* ]] && [[ "$(pending)" == 30 ]]; then
  pass
else
  fail "outbox replay should make the 30 events pending again (exit $rc, $(pending) pending): $output"
fi
run_relay again
read_streams range-again.jsonl
# lengths FILE: the XLEN of each stream, from the summary of a range read, as sorted JSON.
lengths() {
  python3 -c 'import json, sys
summary = [json.loads(l) for l in open(sys.argv[1]) if "summary" in l][-1]
print(json.dumps(summary["streams"], sort_keys=True))' "$1"
}
before="$(lengths "$work_dir/range.jsonl" 2>&1)" || true
after="$(lengths "$work_dir/range-again.jsonl" 2>&1)" || true
if [[ -n "$before" && "$before" == "$after" ]]; then
  pass
else
  fail "a replay within the dedup window should append nothing; stream lengths before $before, after $after"
fi
duplicates="$(grep -o '"redis_duplicates":[0-9]*' "$work_dir/again.out" | tail -1 | cut -d: -f2 || true)"
echo "redis_interop: stream lengths after the replay: $after"
echo "redis_interop: replayed events the script did not append again (the relay's redis_duplicates): ${duplicates:-not shown}"
if [[ -z "$duplicates" || "$duplicates" == 30 ]]; then
  pass
else
  show_log "second relay's stats" "$work_dir/again.out"
  fail "the second relay should count the 30 replayed events as redis_duplicates, not $duplicates"
fi
read_group group-again.jsonl
verdicts="$(check_group group-again.jsonl 0)" || fail "the group comparison script failed"
tally <<<"$verdicts"
audit_ok "after the replay"

summary_and_exit
