#!/usr/bin/env bash
# What the Kafka sink publishes, read by libraries no one here wrote: a node consumer
# (tests/interop/kafka_reader.js) reads the topics with kafkajs 2.2.4, a Kafka client in
# JavaScript sharing no code with librdkafka, and reads every message as a binary-mode CloudEvent
# of the Kafka protocol binding with the CloudEvents SDK (cloudevents 9.0.0, strict validation).
# The relay, with --kafka-cloudevents-source, publishes 30 events over 6 aggregates (ids and
# payloads with non-ASCII text, some payloads bare JSON scalars) to topics of 3 partitions; every
# message must be read once, pass every check, match what the table holds (ce_ headers, key,
# value, time to the microsecond; a producer's own ce_ and content-type headers left out), sit in
# the partition the Java client's partitioner gives its key, and each aggregate's sequence must go
# up by one in offset order as kafkajs reads it. The check is live: a relay without
# --kafka-cloudevents-source writes messages in which the SDK finds no CloudEvent.
#
# Usage: kafka_interop.sh /path/to/outbox /path/to/source_dir
# Needs: psql, python3, node and npm on PATH (scripts/install-deps.sh), the npm registry or npm's
# cache (`npm ci` installs tests/interop/package-lock.json into tests/interop/node_modules),
# PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: kafka_interop.sh /path/to/outbox /path/to/source_dir}"
readonly source_dir="${2:?usage: kafka_interop.sh /path/to/outbox /path/to/source_dir}"
readonly schema=shop
readonly publish_timeout_s=60
readonly read_timeout_s=60
readonly interop_dir="$source_dir/tests/interop"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init kafka_interop outbox-kafka-interop-test

# --- the reader's libraries, as pinned in package-lock.json --------------------------------------
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 ||
    fatal "$tool not found: this test runs the npm packages kafkajs and cloudevents" \
      "under node; install nodejs and npm (scripts/install-deps.sh)"
done
npm ci --prefix "$interop_dir" --no-audit --no-fund --loglevel=error >"$work_dir/npm.log" 2>&1 ||
  fatal --log "$work_dir/npm.log" "npm ci in $interop_dir failed (it needs the npm registry or npm's cache)"

start_postgres
# Three partitions a topic: six aggregates share them, so per-key order is the partition's order.
start_kafka_mock --topic outbox.order --topic outbox.customer --topic outbox.audit --partitions 3
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
# run_relay NAME [FLAG...]: `outbox relay --sink kafka` with FLAG... until no row is pending (or
# "$publish_timeout_s" s), then SIGTERM; it must have published everything and exit 0.
run_relay() {
  local name="$1"
  shift
  relay_until_published "$name" --sink kafka --kafka-brokers "$brokers" \
    --topic-template 'outbox.{aggregate_type}' "$@"
}

# read_topics NAME COUNT TOPIC...: the node reader, its lines in "$work_dir/NAME.jsonl".
read_topics() {
  local name="$1" count="$2" rc=0
  shift 2
  node "$interop_dir/kafka_reader.js" "$brokers" "$count" "$read_timeout_s" "$@" \
    >"$work_dir/$name.jsonl" 2>"$work_dir/$name.err" || rc=$?
  if ((rc == 0)); then
    pass
  else
    show_log "$name stderr" "$work_dir/$name.err"
    fail "the kafkajs reader ($name) exited $rc"
  fi
}

# --- 1. 30 events over 6 aggregates, interleaved ------------------------------------------------
# Payloads are objects and arrays, some with non-ASCII text, and at the last step bare JSON
# scalars (42, "café", true, null, 3.5, ""). http_interop.sh leaves scalars out because
# cloudevents 9.0.0's HTTP binding quotes a body not starting with [, { or " before parsing it
# (42 reads back as the string "42"); its Kafka binding JSON.parses the value itself
# (extractBinaryData), so here scalars read back as sent and are checked like the rest.
# Step 4 carries a header of the producer's (tenant, which goes out) and ce_id, ce_extra and
# content-type ones, which the sink must leave out when it writes the CloudEvents headers: sent,
# they would repeat ce_id (the reader refuses a repeated header), add an extension "extra" or
# change the data's content type.
lines="$(python3 - <<'PY'
import json
aggregates = [("order", "o-1"), ("customer", "c-1"), ("order", "o-2"),
              ("customer", "c-Zo\u00eb \U0001F642"), ("order", "o-\u00fc-3"), ("customer", "\u9867\u5ba2-7")]
scalars = [42, "caf\u00e9", True, None, 3.5, ""]
for step in range(1, 6):                   # 5 events each, one of every aggregate in turn
    for i, (aggregate_type, aggregate_id) in enumerate(aggregates):
        row = {"aggregate_type": aggregate_type, "aggregate_id": aggregate_id,
               "event_type": f"{aggregate_type.capitalize()}Step{step}",
               "payload": {"step": step, "note": "caf\u00e9 \u2603 \u00df", "lines": [{"sku": "a", "qty": step}],
                           "price": 19.99, "empty": {}, "none": None, "flag": step % 2 == 0}}
        if aggregate_type == "customer":
            row["schema_version"] = 2
        if step == 3:
            row["payload"] = [step, "\u00e9t\u00e9", {"nested": ["x", None]}]
        if step == 4:
            row["payload"] = {}
            row["headers"] = {"tenant": "acme", "ce_id": "spoofed", "ce_extra": "x", "content-type": "text/plain"}
        if step == 5:
            row["payload"] = scalars[i]
        print(json.dumps(row))
PY
)"
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue.out" \
  2>&1 <<<"$lines" || fatal --log "$work_dir/enqueue.out" "outbox enqueue --stdin failed"
total="$(sql -c "SELECT count(*) FROM $schema.outbox_events")"
if [[ "$total" == 30 ]]; then pass; else fail "30 events should be written, found $total"; fi

# --- 2. the relay publishes them with the CloudEvents headers; kafkajs and the SDK read them -----
run_relay relay --kafka-cloudevents-source /shop
# What the table holds, to compare with what the libraries read.
sql -c "SELECT json_build_object('id', event_id, 'type', event_type, 'aggregate_type', aggregate_type,
    'aggregate_id', aggregate_id, 'sequence', aggregate_sequence::text,
    'schema_version', schema_version::text, 'payload', payload, 'headers', headers,
    'time', to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))
  FROM $schema.outbox_events" >"$work_dir/expected.jsonl"
read_topics reader 30 outbox.order outbox.customer

verdicts="$(python3 - "$work_dir/expected.jsonl" "$work_dir/reader.jsonl" <<'PY'
import json, sys
expected = {e["id"]: e for e in map(json.loads, open(sys.argv[1]))}
lines = [json.loads(line) for line in open(sys.argv[2])]
summary = [line for line in lines if line.get("summary")]
got = [line for line in lines if not line.get("summary")]
def verdict(name, problems):
    print(f"{name}: ok" if not problems else f"{name}: {problems[:5]}")
verdict("one summary line", [] if len(summary) == 1 else [f"{len(summary)} summary lines"])
s = summary[-1] if summary else {}
verdict("the reader did not time out", [] if s.get("timed_out") is False else [s])
verdict("every message read as a valid CloudEvent, every check ok",
        [f'{r["topic"]}/{r["partition"]}@{r["offset"]} {r.get("key")!r}: {r["error"]}' for r in got if not r["ok"]])
read = [r["ce_id"] or "(no ce_id)" for r in got]
verdict("every event read, once", sorted(set(expected) - set(read)) +
        [f"{i} read {read.count(i)} times" for i in sorted(set(read)) if read.count(i) != 1] +
        [f"{i}: not an event of the table" for i in sorted(set(read) - set(expected))])
verdict("per-aggregate order held (sequence +1 in offset order, one partition per key)",
        s.get("order_problems", ["no summary"]) + ([] if s.get("keys") == 6 else [f'{s.get("keys")} keys, expected 6']))
ce_headers = {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_subject", "ce_time",
              "ce_aggregatetype", "ce_aggregatesequence", "ce_schemaversion", "content-type",
              "event_id", "event_type", "aggregate_type", "aggregate_sequence", "schema_version"}
problems = []
for r in filter(lambda r: r["ok"] and r.get("id") in expected, got):
    e = expected[r["id"]]
    want = {"topic": f'outbox.{e["aggregate_type"]}', "key": e["aggregate_id"], "type": e["type"],
            "source": "/shop", "specversion": "1.0", "subject": e["aggregate_id"],
            "partitionkey": e["aggregate_id"], "aggregatetype": e["aggregate_type"],
            "aggregatesequence": e["sequence"], "schemaversion": e["schema_version"],
            "time": e["time"], "datacontenttype": "application/json", "data": e["payload"],
            "extensions": ["aggregatesequence", "aggregatetype", "partitionkey", "schemaversion"],
            "header_names": sorted(ce_headers | {h for h in e["headers"] if not h.startswith("ce_") and h != "content-type"})}
    have = {k: r.get(k) for k in want}
    have["header_names"] = sorted(have["header_names"] or [])
    problems += [f'{r["id"]} {k}: read {have[k]!r}, the table has {v!r}' for k, v in want.items() if have[k] != v]
verdict("what the libraries read is what the table holds", problems)
# Not checked, shown: the SDK keeps ce_time to the millisecond (a JavaScript Date), and the
# Kafka timestamp is when the relay produced the message, not ce_time.
from datetime import datetime
sample = next((r for r in got if r["ok"]), None)
if sample:
    print(f'note: cloudevents read ce_time {sample["time"]} as {sample["sdk_time"]}')
    lags = [int(r["kafka_timestamp"]) - datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp() * 1000
            for r in got if r["ok"]]
    print(f"note: Kafka timestamps are {min(lags):.0f} to {max(lags):.0f} ms after ce_time")
PY
)" || fail "the comparison script failed"
while IFS= read -r line; do
  case "$line" in
    note:*) echo "$line" ;;
    *": ok") pass ;;
    *) fail "$line" ;;
  esac
done <<<"$verdicts"
grep -h '"summary":true' "$work_dir/reader.jsonl" | sed 's/^/summary: /'

# --- 3. live: without --kafka-cloudevents-source the SDK finds no CloudEvent ---------------------
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue2.out" 2>&1 <<'LINES' ||
{"aggregate_type": "audit", "aggregate_id": "a-1", "event_type": "Audited", "payload": {"n": 1}}
{"aggregate_type": "audit", "aggregate_id": "a-2", "event_type": "Audited", "payload": {"n": 2}}
{"aggregate_type": "audit", "aggregate_id": "a-1", "event_type": "Audited", "payload": {"n": 3}}
{"aggregate_type": "audit", "aggregate_id": "a-2", "event_type": "Audited", "payload": {"n": 4}}
LINES
  fatal --log "$work_dir/enqueue2.out" "outbox enqueue of the audit events failed"
run_relay relay2
read_topics plain 4 outbox.audit
verdict="$(python3 - "$work_dir/plain.jsonl" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1])]
s = lines[-1] if lines and lines[-1].get("summary") else {}
got = [line for line in lines if not line.get("summary")]
problems = [] if (s.get("messages"), s.get("distinct"), s.get("ok"), s.get("not_cloudevents"), s.get("order_ok"),
                  s.get("timed_out")) == (4, 4, 0, 4, True, False) else [s]
problems += [f'{r["offset"]}: {r["error"]!r}' for r in got
             if r["ok"] or r["error"] != "cloudevents toEvent: ValidationError: No CloudEvent detected"
             or any(h.startswith("ce_") or h == "content-type" for h in r.get("header_names", []))]
print("ok" if not problems else problems[:5])
PY
)" || fail "the comparison script (no CloudEvents) failed"
if [[ "$verdict" == ok ]]; then
  pass
else
  fail "a relay without --kafka-cloudevents-source: the SDK should find no CloudEvent in any of its 4 messages: $verdict"
fi
grep -h '"summary":true' "$work_dir/plain.jsonl" | sed 's/^/summary without ce_ headers: /'

summary_and_exit
