#!/usr/bin/env bash
# The RabbitMQ sink as an operator runs it, read back by a library no one here wrote:
# `outbox relay --sink rabbitmq` publishes 30 events over 6 aggregates (non-ASCII ids and
# payloads) to a node of Debian's rabbitmq-server, with publisher confirms, to a topic exchange
# whose queues amqplib 2.3.1 (tests/interop/rabbitmq_setup.js, the amqp-node project's JavaScript
# client) declared: a quorum queue with a single active consumer and a stream queue, both bound
# with "#". amqplib (tests/interop/rabbitmq_reader.js) consumes the quorum queue. Every event must
# arrive once, persistent, as application/json, with message-id = event_id = the table's id, the
# routing key <type>.<partition> (Kafka's murmur2 of the aggregate id, computed in
# Python: murmur2.py), the payload and headers the table holds (aggregate_sequence an AMQP integer, the
# event's own x- header dropped, the CloudEvents AMQP binding's cloudEvents_ headers), each
# aggregate's sequence going up by one in the order the consumer received them. `outbox audit
# --sink rabbitmq` reads the stream queue back by time and finds each event once. Also: an
# exchange that does not exist stops the relay with what to do; a message no queue is bound for
# comes back (mandatory) and its event stays unpublished, counted in rabbitmq_returns; --rabbitmq-*
# flags with another sink, an aggregate id in the routing key and amqps:// are refused.
#
# Usage: rabbitmq_interop.sh /path/to/outbox /path/to/source_dir
# Needs: psql, python3, node, npm, rabbitmq-server, setsid (scripts/install-deps.sh).
set -euo pipefail

readonly outbox_binary="${1:?usage: rabbitmq_interop.sh /path/to/outbox /path/to/source_dir}"
readonly source_dir="${2:?usage: rabbitmq_interop.sh /path/to/outbox /path/to/source_dir}"
readonly schema=shop
readonly publish_timeout_s=60
readonly interop_dir="$source_dir/tests/interop"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init rabbitmq_interop outbox-rabbitmq-interop-test

for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 ||
    fatal "$tool not found: this test runs the npm package amqplib under node (scripts/install-deps.sh)"
done
npm ci --prefix "$interop_dir" --no-audit --no-fund --loglevel=error >"$work_dir/npm.log" 2>&1 ||
  fatal --log "$work_dir/npm.log" "npm ci in $interop_dir failed (it needs the npm registry or npm's cache)"

start_postgres
start_rabbitmq
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
pending() { sql -c "SELECT count(*) FROM ${1:-$schema}.outbox_events WHERE published_at IS NULL"; }

# What every relay here shares; --rabbitmq-exchange and the rest follow.
relay_flags=(--sink rabbitmq --rabbitmq-url "$rabbitmq_url"
  --rabbitmq-routing-key-template '{aggregate_type}.{partition}' --rabbitmq-partitions 4
  --stats-format json)

# run_relay NAME [FLAG...]: `outbox relay --sink rabbitmq` to exchange shop until nothing is
# pending, then SIGTERM.
run_relay() {
  local name="$1"
  shift
  relay_until_published "$name" "${relay_flags[@]}" --rabbitmq-exchange shop "$@"
}

# --- 1. refusals before anything is sent -----------------------------------------------------------
expect_failure "--rabbitmq-* with the Kafka sink" "the --rabbitmq-* flags are for --sink rabbitmq" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink kafka --kafka-brokers 127.0.0.1:1 \
  --rabbitmq-exchange x
expect_failure "an aggregate id in the routing key" "{aggregate_id} is not allowed" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink rabbitmq \
  --rabbitmq-url "$rabbitmq_url" --rabbitmq-exchange shop \
  --rabbitmq-routing-key-template 'order.{aggregate_id}'
expect_failure "amqps://" "not supported yet" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink rabbitmq --rabbitmq-url amqps://x/ \
  --rabbitmq-exchange shop

# --- 2. 30 events over 6 aggregates; an exchange that does not exist stops the relay -------------
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
            row["headers"] = {"tenant": "acme", "x-delay": "5000"}
        print(json.dumps(row))
PY
)"
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue.out" \
  2>&1 <<<"$lines" || fatal --log "$work_dir/enqueue.out" "outbox enqueue --stdin failed"

rc=0
timeout 30 "$outbox_binary" relay --db "$db" --schema "$schema" "${relay_flags[@]}" \
  --rabbitmq-exchange shop >"$work_dir/missing.out" 2>&1 || rc=$?
if ((rc != 0)) && grep -q "RabbitMQ exchange shop does not exist" "$work_dir/missing.out" &&
  grep -q -- "--rabbitmq-declare-exchange" "$work_dir/missing.out"; then
  pass
else
  show_log "relay without an exchange" "$work_dir/missing.out"
  fail "a relay to a missing exchange should stop (exit $rc) saying how to declare it"
fi
if [[ "$(pending)" == 30 ]]; then pass; else fail "nothing should be marked published without an exchange"; fi

# --- 3. published, read back by amqplib ----------------------------------------------------------
node "$interop_dir/rabbitmq_setup.js" "$rabbitmq_url" >"$work_dir/setup.out" 2>&1 ||
  fatal --log "$work_dir/setup.out" "amqplib could not declare the exchange and queues"
run_relay relay --rabbitmq-declare-exchange --rabbitmq-cloudevents-source /shop
node "$interop_dir/rabbitmq_reader.js" "$rabbitmq_url" shop.all 30 60 >"$work_dir/reader.jsonl" \
  2>"$work_dir/reader.err" || { show_log reader "$work_dir/reader.err"; fail "amqplib reader failed"; }
sql -c "SELECT json_build_object('id', event_id, 'type', event_type, 'aggregate_type', aggregate_type,
    'aggregate_id', aggregate_id, 'sequence', aggregate_sequence::text, 'payload', payload::text,
    'headers', headers) FROM $schema.outbox_events" >"$work_dir/expected.jsonl"

check_queue() {
  PYTHONPATH="$cli_dir" python3 - "$work_dir/expected.jsonl" "$work_dir/reader.jsonl" <<'PY'
import json, sys, time
from murmur2 import partition  # tests/cli/murmur2.py: Kafka's partitioner
expected = {e["id"]: e for e in map(json.loads, open(sys.argv[1]))}
lines = [json.loads(l) for l in open(sys.argv[2])]
summary = [l for l in lines if l.get("summary")]
got = [l for l in lines if not l.get("summary")]
def verdict(name, problems):
    print(f"{name}: ok" if not problems else f"{name}: {problems[:5]}")
s = summary[-1] if summary else {}
verdict("amqplib consumed 30 messages and left none in the queue",
        [] if (s.get("consumed"), s.get("extra"), s.get("timed_out")) == (30, 0, False) else [s])
ids = [g["properties"].get("messageId") for g in got]
verdict("every event once, message-id = event_id = the table's id",
        sorted(set(expected) - set(ids)) + sorted(set(ids) - set(expected)) +
        [i for i in set(ids) if ids.count(i) != 1] +
        [n for n, g in enumerate(got) if g["headers"].get("event_id") != g["properties"].get("messageId")])
problems, last, now = [], {}, time.time()
for n, g in enumerate(got):
    p, h = g["properties"], g["headers"]
    e = expected.get(p.get("messageId"), {})
    want_key = f'{e.get("aggregate_type")}.{partition(e.get("aggregate_id", ""), 4)}'
    checks = {"routing key": (g["routing_key"], want_key),
              "deliveryMode": (p.get("deliveryMode"), 2),
              "contentType": (p.get("contentType"), "application/json"),
              "type": (p.get("type"), e.get("type")), "appId": (p.get("appId"), "outbox"),
              "timestamp within the hour": (abs(now - (p.get("timestamp") or 0)) < 3600, True),
              "payload": (json.loads(g["data"]), json.loads(e.get("payload", "null"))),
              "aggregate_type": (h.get("aggregate_type"), e.get("aggregate_type")),
              "aggregate_id": (h.get("aggregate_id"), e.get("aggregate_id")),
              "aggregate_sequence": (h.get("aggregate_sequence"), int(e.get("sequence", -1))),
              "event_type": (h.get("event_type"), e.get("type")),
              "cloudEvents_id": (h.get("cloudEvents_id"), e.get("id")),
              "cloudEvents_source": (h.get("cloudEvents_source"), "/shop"),
              "cloudEvents_subject": (h.get("cloudEvents_subject"), e.get("aggregate_id")),
              "tenant": (h.get("tenant"), (e.get("headers") or {}).get("tenant")),
              "x-delay absent": ("x-delay" in h, False)}
    problems += [f'message {n} {k}: read {a!r}, want {b!r}' for k, (a, b) in checks.items() if a != b]
    key = (e.get("aggregate_type"), e.get("aggregate_id"))
    sequence = h.get("aggregate_sequence") if isinstance(h.get("aggregate_sequence"), int) else 0
    if sequence != last.get(key, 0) + 1:
        problems.append(f'message {n}: {key} sequence {sequence} after {last.get(key, 0)}')
    last[key] = sequence
verdict("routing key, properties, payload and headers are the table's; each aggregate in order",
        problems)
PY
}
verdicts="$(check_queue)" || fail "the comparison script failed"
while IFS= read -r line; do
  case "$line" in
    *": ok") pass ;;
    *) fail "$line" ;;
  esac
done <<<"$verdicts"

# --- 4. outbox audit --sink rabbitmq: the stream queue read back by time ------------------------
rc=0
"$outbox_binary" audit --db "$db" --schema "$schema" --sink rabbitmq --rabbitmq-url "$rabbitmq_url" \
  --rabbitmq-audit-queue shop.audit --since 1h --json >"$work_dir/audit.json" \
  2>"$work_dir/audit.err" || rc=$?
verdict="$(python3 - "$work_dir/audit.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
want = {"stream_queue": "shop.audit", "rows": 30, "published": 30, "messages": 30, "lost": [],
        "phantom": [], "duplicated": [], "ok": True}
print("ok" if all(a.get(k) == v for k, v in want.items()) else {k: a.get(k) for k in want})
PY
)" || verdict="unreadable"
if ((rc == 0)) && [[ "$verdict" == ok ]]; then
  pass
else
  show_log "audit stderr" "$work_dir/audit.err"
  fail "outbox audit --sink rabbitmq should find the 30 events once each (exit $rc): $verdict"
fi
expect_failure "audit of a queue that does not exist" "does not exist" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --sink rabbitmq \
  --rabbitmq-url "$rabbitmq_url" --rabbitmq-audit-queue nope --since 1h

# --- 5. no queue bound: the message comes back, the event stays unpublished ---------------------
# A schema of its own, so that its one event is all that is pending.
"$outbox_binary" migrate --db "$db" --schema shop2 >/dev/null 2>&1 || fatal "migrate of shop2 failed"
"$outbox_binary" enqueue --db "$db" --schema shop2 --aggregate-type order --aggregate-id o-9 \
  --event-type OrderPlaced --payload '{"total": 9}' >"$work_dir/enqueue2.out" 2>&1 ||
  fatal --log "$work_dir/enqueue2.out" "outbox enqueue into shop2 failed"
rc=0
timeout 8 "$outbox_binary" relay --db "$db" --schema shop2 "${relay_flags[@]}" \
  --rabbitmq-exchange unbound --rabbitmq-declare-exchange --stats-every 1s \
  >"$work_dir/unbound.out" 2>"$work_dir/unbound.err" || rc=$?
if [[ "$(pending shop2)" == 1 ]]; then
  pass
else
  show_log "unbound stderr" "$work_dir/unbound.err"
  fail "an event no queue is bound for should stay unpublished"
fi
if grep -q '"rabbitmq_returns":[1-9]' "$work_dir/unbound.out"; then
  pass
else
  show_log "unbound stats (exit $rc)" "$work_dir/unbound.out"
  show_log "unbound stderr" "$work_dir/unbound.err"
  fail "the relay's stats should count the returned message in rabbitmq_returns"
fi

summary_and_exit
