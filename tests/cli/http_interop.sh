#!/usr/bin/env bash
# What the HTTP sink sends, read by libraries no one here wrote: a node endpoint
# (tests/interop/webhook_receiver.js) verifies every request's webhook-signature with the Standard
# Webhooks reference library (standardwebhooks 1.1.1), both signatures of a rotation each under
# its own secret, and reads the request as a binary-mode CloudEvent with the CloudEvents SDK
# (cloudevents 9.0.0, strict validation). The relay publishes ~20 events over several aggregates
# (one with a trace context, one whose id needs percent-encoding); every request must pass, every
# event arrive, and what the libraries read must be what the table holds. The checks are live: the
# library rejects a tampered body, and a receiver holding a wrong secret answers 400, which the
# relay quarantines with that reason.
#
# Usage: http_interop.sh /path/to/outbox /path/to/source_dir
# Needs: psql, node and npm on PATH (scripts/install-deps.sh), the npm registry or npm's cache
# (`npm ci` installs tests/interop/package-lock.json into tests/interop/node_modules), PostgreSQL
# server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: http_interop.sh /path/to/outbox /path/to/source_dir}"
readonly source_dir="${2:?usage: http_interop.sh /path/to/outbox /path/to/source_dir}"
readonly schema=shop
readonly publish_timeout_s=60
readonly interop_dir="$source_dir/tests/interop"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init http_interop outbox-http-interop-test

# --- the receiver's libraries, as pinned in package-lock.json ------------------------------------
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 ||
    fatal "$tool not found: this test runs the npm packages standardwebhooks and cloudevents" \
      "under node; install nodejs and npm (scripts/install-deps.sh)"
done
npm ci --prefix "$interop_dir" --no-audit --no-fund --loglevel=error >"$work_dir/npm.log" 2>&1 ||
  fatal --log "$work_dir/npm.log" "npm ci in $interop_dir failed (it needs the npm registry or npm's cache)"

start_postgres
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
pending() { sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL"; }
# Pending rows the relay can still move: neither quarantined nor behind a quarantined one.
movable() {
  sql -c "SELECT count(*) FROM $schema.outbox_events e WHERE published_at IS NULL AND NOT EXISTS (
    SELECT 1 FROM $schema.outbox_events q WHERE q.aggregate_type = e.aggregate_type
      AND q.aggregate_id = e.aggregate_id AND q.quarantined_at IS NOT NULL)"
}

# Two Standard Webhooks secrets, as while rotating: a 32-byte key (base64 with padding) and a
# 24-byte one (the shortest allowed, no padding).
secret() { printf 'whsec_%s\n' "$(head -c "$1" /dev/urandom | base64 -w 0)"; }
(
  umask 077
  { secret 32; secret 24; } >"$work_dir/secrets"
  secret 32 >"$work_dir/wrong-secret"
)

# start_receiver NAME SECRETS_FILE: starts the node endpoint, tracked for cleanup; sets
# receiver_pid and receiver_port. Its requests go to "$work_dir/NAME.jsonl", its stdout to
# "$work_dir/NAME.out".
start_receiver() {
  local name="$1" secrets="$2" line
  : >"$work_dir/$name.out"
  : >"$work_dir/$name.jsonl"
  node "$interop_dir/webhook_receiver.js" "$work_dir/$name.jsonl" "$secrets" \
    >"$work_dir/$name.out" 2>"$work_dir/$name.err" &
  receiver_pid=$!
  track_background "$receiver_pid" "webhook receiver $name"
  line="$(wait_for_first_line "$receiver_pid" "$work_dir/$name.out" "${startup_timeout_s:-30}")" ||
    fatal --log "$work_dir/$name.err" "the webhook receiver ($name) printed no port"
  receiver_port="${line#listening }"
  [[ "$receiver_port" =~ ^[0-9]+$ ]] || fatal "the receiver's first line should be \"listening PORT\": $line"
  # The library's own round trip, printed right after the port: a tampered body fails.
  local deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && [[ "$(wc -l <"$work_dir/$name.out")" -lt 2 ]]; do sleep 0.1; done
  if grep -q '^tamper check: verify rejected a tampered body (WebhookVerificationError: ' \
    "$work_dir/$name.out"; then
    pass
  else
    fail "the receiver ($name) should show verify rejecting a tampered body: $(cat "$work_dir/$name.out")"
  fi
}

# start_relay NAME: `outbox relay --sink http` to the receiver on "$receiver_port", signing with
# both secrets, in the background; sets relay_pid.
start_relay() {
  local name="$1"
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink http \
    --http-url "http://127.0.0.1:$receiver_port/hooks/{aggregate_type}/{aggregate_id}" \
    --http-signing-secret-file "$work_dir/secrets" --http-header 'X-Tenant: acme' \
    --http-cloudevents-source /shop >"$work_dir/$name.out" 2>"$work_dir/$name.err" &
  relay_pid=$!
  track_background "$relay_pid" "relay $name"
}

# stop NAME PID: SIGTERM, and the process must exit 0 within 20 s.
stop() {
  local name="$1" pid="$2" rc=0 deadline=$((SECONDS + 20))
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  wait "$pid" || rc=$?
  if ((rc == 0)); then pass; else fail "$name should exit 0 after SIGTERM, got $rc"; fi
}

# --- 1. ~20 events over several aggregates -------------------------------------------------------
# Payloads are objects and an array. Not a bare number, true or null: the body is then correct
# JSON, but cloudevents 9.0.0's JSON parser quotes any body not starting with [, { or " before
# parsing it, so `42` reads back as the string "42" and the data check would fail on the SDK.
lines="$(python3 - <<'PY'
import json
rows = []
for i in range(1, 5):                      # 4 orders, 3 events each
    for event_type, payload in (("OrderPlaced", {"total": 10 * i, "lines": [{"sku": "a", "qty": i}]}),
                                ("OrderPaid", {"amount": 10 * i, "currency": "EUR"}),
                                ("OrderShipped", {"carrier": "dhl", "note": "caf\u00e9 \u2603"})):
        rows.append({"aggregate_type": "order", "aggregate_id": f"o-{i}", "event_type": event_type,
                     "payload": payload})
for i in range(1, 4):                      # 3 customers, 2 events each
    rows.append({"aggregate_type": "customer", "aggregate_id": f"c-{i}", "event_type": "CustomerCreated",
                 "payload": {"name": f"customer {i}"}, "schema_version": 2})
    rows.append({"aggregate_type": "customer", "aggregate_id": f"c-{i}", "event_type": "CustomerRenamed",
                 "payload": {"name": f"renamed {i}", "empty": {}, "none": None}, "schema_version": 2})
# an id with a space, a slash, a percent sign and a non-ASCII letter: percent-encoded on the wire
rows.append({"aggregate_type": "account", "aggregate_id": "acct 7/50%/\u00e9", "event_type": "AccountOpened",
             "payload": [1, "two", {"three": 3}]})
# a trace context; its tenant header must not go out
rows.append({"aggregate_type": "account", "aggregate_id": "a-1", "event_type": "AccountOpened",
             "payload": {"traced": True}, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
             "headers": {"tracestate": "congo=t61rcWkgMzE", "tenant": "acme"}})
for row in rows:
    print(json.dumps(row))
PY
)"
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue.out" \
  2>&1 <<<"$lines" || fatal --log "$work_dir/enqueue.out" "outbox enqueue --stdin failed"
total="$(sql -c "SELECT count(*) FROM $schema.outbox_events")"
if [[ "$total" == 20 ]]; then pass; else fail "20 events should be written, found $total"; fi

# --- 2. the relay delivers them to the receiver holding both secrets -----------------------------
start_receiver receiver "$work_dir/secrets"
start_relay relay
deadline=$((SECONDS + publish_timeout_s))
while ((SECONDS < deadline)) && [[ "$(movable)" != 0 ]] && kill -0 "$relay_pid" 2>/dev/null; do
  sleep 0.2
done
left="$(pending)"
if [[ "$left" == 0 ]]; then
  pass
else
  show_log "relay stderr" "$work_dir/relay.err"
  show_log "receiver requests" "$work_dir/receiver.jsonl"
  fail "every event should be published; $left are not, $(sql -c \
    "SELECT count(*) FROM $schema.outbox_events WHERE quarantined_at IS NOT NULL") quarantined"
fi
stop relay "$relay_pid"

# What the table holds, to compare with what the libraries read.
sql -c "SELECT json_build_object('id', event_id, 'type', event_type, 'aggregate_type', aggregate_type,
    'aggregate_id', aggregate_id, 'sequence', aggregate_sequence::text,
    'schema_version', schema_version::text,
    'time', to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
    'traceparent', headers->>'traceparent', 'tracestate', headers->>'tracestate',
    'quarantined', quarantined_at IS NOT NULL)
  FROM $schema.outbox_events" >"$work_dir/expected.jsonl"

verdicts="$(python3 - "$work_dir/expected.jsonl" "$work_dir/receiver.jsonl" <<'PY'
import json, sys
from urllib.parse import quote, unquote
expected = {e["id"]: e for e in map(json.loads, open(sys.argv[1]))}
got = [json.loads(line) for line in open(sys.argv[2])]
def verdict(name, problems):
    print(f"{name}: ok" if not problems else f"{name}: {problems[:5]}")
verdict("every request ok", [f'{r["id"]}: {r["error"]}' for r in got if not r["ok"]])
received = {r["id"] for r in got if r["ok"]}
verdict("every event received", sorted(set(expected) - received))
verdict("no event quarantined", [i for i, e in expected.items() if e["quarantined"]])
verdict("two signatures, each verified under its own secret, a tampered body rejected",
        [r["id"] for r in got if (r.get("signatures"), r.get("verified_by"), r.get("tamper_rejected")) != (2, 2, True)])
problems = []
for r in filter(lambda r: r["ok"], got):
    e = expected.get(r["id"])
    if e is None:
        problems.append(f'{r["id"]}: not an event of the table')
        continue
    want = {"type": e["type"], "source": "/shop", "subject": e["aggregate_id"],
            "aggregatetype": e["aggregate_type"], "partitionkey": e["aggregate_id"],
            "sequence": e["sequence"], "schemaversion": e["schema_version"], "time": e["time"],
            "traceparent": e["traceparent"], "tracestate": e["tracestate"], "tenant": "acme", "leaked": [],
            "path": f'/hooks/{quote(e["aggregate_type"], safe="")}/{quote(e["aggregate_id"], safe="")}'}
    # CloudEvents' HTTP binding percent-encodes a header value's space, '"', '%' and non-ASCII
    # bytes, and a receiver decodes them; cloudevents 9.0.0 hands them back still encoded.
    have = {k: r.get(k) for k in want}
    for k in ("subject", "aggregatetype", "partitionkey"):
        if isinstance(have[k], str):
            have[k] = unquote(have[k], errors="strict")
    problems += [f'{r["id"]} {k}: read {have[k]!r}, the table has {v!r}' for k, v in want.items() if have[k] != v]
verdict("what the libraries read is what the table holds", problems)
raw = [r.get("subject") for r in got if expected.get(r["id"], {}).get("aggregate_id", "").startswith("acct ")]
print(f"note: cloudevents read the subject of aggregate 'acct 7/50%/\u00e9' as {raw[:1]}")
PY
)" || fail "the comparison script failed"
while IFS= read -r line; do
  case "$line" in
    note:*) echo "$line" ;;
    *": ok") pass ;;
    *) fail "$line" ;;
  esac
done <<<"$verdicts"
if grep -q '"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"' "$work_dir/receiver.jsonl"; then
  pass
else
  fail "the traced event's traceparent should reach the receiver"
fi
stop "the receiver" "$receiver_pid"

# --- 3. a receiver holding a wrong secret: 400, and the relay quarantines with the reason --------
"$outbox_binary" enqueue --db "$db" --schema "$schema" --stdin >"$work_dir/enqueue2.out" 2>&1 <<'LINES' ||
{"aggregate_type": "refund", "aggregate_id": "r-1", "event_type": "RefundIssued", "payload": {"amount": 5}}
{"aggregate_type": "refund", "aggregate_id": "r-1", "event_type": "RefundSettled", "payload": {"amount": 5}}
{"aggregate_type": "refund", "aggregate_id": "r-2", "event_type": "RefundIssued", "payload": {"amount": 6}}
LINES
  fatal --log "$work_dir/enqueue2.out" "outbox enqueue of the refunds failed"
start_receiver wrong "$work_dir/wrong-secret"
start_relay relay2
deadline=$((SECONDS + publish_timeout_s))
while ((SECONDS < deadline)) && [[ "$(movable)" != 0 ]] && kill -0 "$relay_pid" 2>/dev/null; do
  sleep 0.2
done
stop relay2 "$relay_pid"
heads="$(sql -c "SELECT string_agg(event_id::text, ' ' ORDER BY aggregate_id) FROM $schema.outbox_events
  WHERE aggregate_type = 'refund' AND aggregate_sequence = 1 AND quarantined_at IS NOT NULL
    AND published_at IS NULL")"
waiting="$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE aggregate_id = 'r-1'
  AND aggregate_sequence = 2 AND published_at IS NULL AND quarantined_at IS NULL")"
if [[ "$(wc -w <<<"$heads")" == 2 && "$waiting" == 1 ]]; then
  pass
else
  show_log "relay2 stderr" "$work_dir/relay2.err"
  fail "both refunds' first events should be quarantined, r-1's second waiting behind; quarantined: '$heads'"
fi
list="$("$outbox_binary" quarantine list --db "$db" --schema "$schema" 2>&1)" ||
  fail "outbox quarantine list failed: $list"
listed=0
for id in $heads; do
  # Each event's line, then its reason indented on the next.
  if grep -F -A 1 "$id" <<<"$list" |
    grep -q '^ *HTTP 400: standardwebhooks verify: WebhookVerificationError: No matching signature found'; then
    listed=$((listed + 1))
  fi
done
if ((listed == 2)); then
  pass
else
  fail "outbox quarantine list should show both with the receiver's reason (HTTP 400 ... No matching signature found): $list"
fi
if [[ -s "$work_dir/wrong.jsonl" ]] && ! grep -q '"ok":true' "$work_dir/wrong.jsonl" &&
   [[ "$(grep -c 'No matching signature found' "$work_dir/wrong.jsonl")" == "$(wc -l <"$work_dir/wrong.jsonl")" ]]; then
  pass
else
  fail "every request to the receiver with the wrong secret should fail verification: $(cat "$work_dir/wrong.jsonl")"
fi
echo "quarantine list:"
while IFS= read -r line; do echo "    $line"; done <<<"$list"

summary_and_exit
