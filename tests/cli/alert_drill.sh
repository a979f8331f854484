#!/usr/bin/env bash
# The drill of docs/OPERATIONS.md, with Debian's real Prometheus server: a relay and `outbox
# admin` serve /metrics on loopback, Prometheus scrapes them every second and evaluates
# docs/ops/alerts.yml. While producers write: a healthy relay fires nothing; the relay stopped
# (SIGSTOP) fires the backlog alert (and the relay-down alert) within its `for:`; resumed, the
# backlog drains and the alert clears. Then, beside it, `outbox status --json` and `--watch`,
# `outbox replay`, and the relay's `--log-format json`.
#
# The rules are the shipped file with only its durations shortened: every `for:` becomes 5s and
# the backlog threshold 60 s becomes 4 s, so the drill takes seconds, not minutes. The
# expressions are the shipped ones.
#
# Usage: alert_drill.sh /path/to/outbox REPO_DIR
# Needs: psql, prometheus (Debian package prometheus), curl, python3.
set -euo pipefail

readonly outbox_binary="${1:?usage: alert_drill.sh /path/to/outbox REPO_DIR}"
readonly repo_dir="${2:?usage: alert_drill.sh /path/to/outbox REPO_DIR}"
readonly schema=drill
readonly startup_timeout_s=30
readonly fire_timeout_s=60
readonly clear_timeout_s=60

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init alert_drill outbox-alert-drill

for tool in prometheus curl python3 psql; do
  command -v "$tool" >/dev/null || fatal "$tool is not installed (scripts/install-deps.sh installs it)"
done

# --- 1. PostgreSQL, the Kafka mock, the schema ------------------------------------------------
start_postgres
start_kafka_mock
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null

# --- 2. the relay and outbox admin, each on a port the kernel picks ----------------------------
"$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --metrics-listen 127.0.0.1:0 --backlog-refresh 1s >"$work_dir/relay.out" 2>&1 &
relay_pid=$!
track_background "$relay_pid" "outbox relay"
"$outbox_binary" admin --db "$db" --schema "$schema" --listen 127.0.0.1:0 \
  --backlog-refresh 1s >"$work_dir/admin.out" 2>&1 &
admin_pid=$!
track_background "$admin_pid" "outbox admin"
relay_port="$(listening_port "$work_dir/relay.out" "$relay_pid")" ||
  fatal --log "$work_dir/relay.out" "the relay did not say where it serves /metrics"
admin_port="$(listening_port "$work_dir/admin.out" "$admin_pid")" ||
  fatal --log "$work_dir/admin.out" "outbox admin did not say where it serves"
if curl -sf "http://127.0.0.1:$relay_port/readyz" >/dev/null; then pass; else
  fail "the relay's /readyz did not answer 200"
fi

# --- 3. Prometheus with the shipped rules, durations shortened -----------------------------------
prometheus_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
sed -E 's/^( *for: ).*/\15s/; /alert: OutboxBacklogAge/,/for:/ s/> 60$/> 4/' \
  "$repo_dir/docs/ops/alerts.yml" >"$work_dir/alerts.yml"
grep -q '> 4$' "$work_dir/alerts.yml" || fatal "the backlog threshold was not rewritten: has docs/ops/alerts.yml changed form?"
cat >"$work_dir/prometheus.yml" <<YAML
global:
  # A failed scrape marks its series stale at once, and an alert with no data resolves: on a
  # loaded machine (the rest of the suite beside this test) a 1 s timeout failed now and then.
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 1s
rule_files: ["$work_dir/alerts.yml"]
scrape_configs:
  - job_name: outbox-relay
    static_configs: [{targets: ["127.0.0.1:$relay_port"]}]
  - job_name: outbox-admin
    static_configs: [{targets: ["127.0.0.1:$admin_port"]}]
YAML
prometheus --config.file="$work_dir/prometheus.yml" --storage.tsdb.path="$work_dir/tsdb" \
  --web.listen-address="127.0.0.1:$prometheus_port" >"$work_dir/prometheus.log" 2>&1 &
track_background $! "prometheus"
api="http://127.0.0.1:$prometheus_port/api/v1"

# Alerts in state `state` (firing|pending|any), one name per line.
alerts() {
  curl -sf "$api/alerts" | python3 -c '
import json, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
state = sys.argv[1]
for a in json.load(sys.stdin)["data"]["alerts"]:
    if state == "any" or a["state"] == state:
        print(a["labels"]["alertname"])' "$1"
}
# Waits up to $2 s for `up` to read 1 for $1 targets.
wait_for_targets() {
  local want="$1" deadline=$((SECONDS + $2)) up
  while ((SECONDS < deadline)); do
    up="$(curl -sf "$api/query?query=sum(up)" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)' 2>/dev/null || echo 0)"
    if [[ "$up" == "$want" ]]; then return 0; fi
    sleep 0.5
  done
  return 1
}
# Waits up to $2 s until alert $1 is firing (or, with $3 = clear, until it is in no state).
wait_for_alert() {
  local name="$1" deadline=$((SECONDS + $2)) mode="${3:-firing}"
  while ((SECONDS < deadline)); do
    if [[ "$mode" == firing ]] && alerts firing | grep -x "$name" >/dev/null; then return 0; fi
    if [[ "$mode" == clear ]] && ! alerts any | grep -x "$name" >/dev/null; then return 0; fi
    sleep 0.5
  done
  return 1
}

wait_for_targets 2 "$startup_timeout_s" ||
  fatal --log "$work_dir/prometheus.log" "Prometheus did not scrape both targets"
pass

# --- 4. producers write all along: one event a 100 ms, each its own aggregate -------------------
(
  i=0
  while :; do
    i=$((i + 1))
    psql "$db" -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO $schema.outbox_events
      (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, payload)
      VALUES (gen_random_uuid(), 'order', 'o-$i', 1, 'Placed', '{\"i\": $i}')" >/dev/null 2>&1 || true
    sleep 0.1
  done
) &
track_background $! "the writer"

# --- 5. healthy: nothing fires ---------------------------------------------------------------------
sleep 10  # two `for:` periods of every rule
firing="$(alerts any | sort -u | tr '\n' ' ')"
if [[ -z "$firing" ]]; then pass; else
  fail "with a healthy relay these alerts are pending or firing: $firing"
fi

# --- 6. the relay stopped: the backlog alert fires ---------------------------------------------
kill -STOP "$relay_pid"
stopped_at=$SECONDS
if wait_for_alert OutboxBacklogAge "$fire_timeout_s"; then
  pass
  echo "alert_drill: OutboxBacklogAge fired $((SECONDS - stopped_at)) s after SIGSTOP"
else
  fail "OutboxBacklogAge did not fire within ${fire_timeout_s} s of SIGSTOP (alerts: $(alerts any | tr '\n' ' '))"
fi
if wait_for_alert OutboxRelayDown 30; then pass; else
  fail "OutboxRelayDown did not fire while the relay was stopped"
fi

# Still firing while the relay stays stopped (it must not clear by itself; a scrape that failed on
# a loaded machine can make it pend again for a moment, so within 10 s).
if wait_for_alert OutboxBacklogAge 10; then pass; else
  fail "OutboxBacklogAge stopped firing while the relay was still stopped (alerts: $(alerts any | tr '\n' ' '); admin: $(tail -3 "$work_dir/admin.out"))"
fi

# --- 7. resumed: the backlog drains and the alert clears ---------------------------------------
kill -CONT "$relay_pid"
resumed_at=$SECONDS
if wait_for_alert OutboxBacklogAge "$clear_timeout_s" clear; then
  pass
  echo "alert_drill: OutboxBacklogAge cleared $((SECONDS - resumed_at)) s after SIGCONT"
else
  fail "OutboxBacklogAge still active ${clear_timeout_s} s after SIGCONT"
fi
if wait_for_alert OutboxRelayDown 30 clear; then pass; else
  fail "OutboxRelayDown did not clear after the relay resumed"
fi
published="$(curl -sf "http://127.0.0.1:$relay_port/metrics" |
  sed -n -E 's/^outbox_relay_events_published_total\{aggregate_type="order"\} ([0-9.e+]+)$/\1/p')"
if [[ -n "$published" ]] && python3 -c "import sys; sys.exit(0 if float('$published') > 50 else 1)"; then
  pass
else
  fail "the relay's published counter reads '${published}' after the drill, expected over 50"
fi

# --- 8. outbox status --json and --watch, beside the running relay -------------------------------
# An ended session as the sweep leaves it (seen_at = -infinity) beside the live one.
sql -c "INSERT INTO $schema.outbox_relays (relay_id, listening, seen_at, ended_at)
  VALUES ('gone-relay', false, '-infinity', now())"
status_json="$("$outbox_binary" status --db "$db" --schema "$schema" --json)"
if python3 -c '
import json, sys
s = json.loads(sys.argv[1])
assert s["published"] > 50 and s["pending"] >= 0, s
live = [r for r in s["relays"] if not r["ended"] and r["seen_seconds_ago"] < 30]
assert live, s["relays"]
assert [r for r in s["relays"] if r["relay_id"] == "gone-relay" and r["ended"]], s["relays"]
' "$status_json"; then pass; else fail "outbox status --json: $status_json"; fi
rc=0
timeout -s INT 3 "$outbox_binary" status --db "$db" --schema "$schema" --json --watch 300ms \
  >"$work_dir/watch.out" 2>"$work_dir/watch.stderr" || rc=$?
# Lines that are not one status object are named (a CI run once counted none, cause unknown: the
# output is kept in the message to find it), and do not hide the ones that are.
lines="$(python3 -c '
import json, sys
good = 0
for number, line in enumerate(open(sys.argv[1], errors="replace"), 1):
    try:
        good += "published" in json.loads(line)
    except ValueError as error:
        print(f"line {number} is not JSON ({error}): {line[:200]!r}", file=sys.stderr)
print(good)' "$work_dir/watch.out" 2>"$work_dir/watch.err" || echo 0)"
if [[ -s "$work_dir/watch.err" || -s "$work_dir/watch.stderr" ]]; then
  echo "alert_drill: note: status --watch: $(cat "$work_dir/watch.err" "$work_dir/watch.stderr")"
fi
if ((lines >= 3)); then pass; else
  fail "status --watch 300ms printed $lines JSON lines in 3 s (rc $rc): $(cat "$work_dir/watch.err" "$work_dir/watch.stderr") $(wc -lc <"$work_dir/watch.out") lines/bytes; its end: $(tail -c 600 "$work_dir/watch.out")"
fi
expect_failure "status --watch below 100ms" "--watch must be at least 100ms" \
  "$outbox_binary" status --db "$db" --schema "$schema" --watch 10ms

# --- 9. outbox replay: a dry run, a replay the running relay publishes again, bad input --------
output="$("$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --aggregate-id o-1 --dry-run 2>&1)"
if [[ "$output" == *"1 published event(s) of 1 aggregate(s)"* && "$output" == *"dry run"* ]]; then
  pass
else
  fail "replay --dry-run: $output"
fi
rc=0
output="$("$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --aggregate-id o-1 \
  --reason "drill" --actor drill --wait 30s 2>&1)" || rc=$?
audits="$(sql -c "SELECT count(*) FROM $schema.outbox_operator_audit WHERE action = 'replay' AND actor = 'drill'")"
if ((rc == 0)) && [[ "$output" == *"published again"*"1/1"* ]] && [[ "$audits" == 1 ]]; then
  pass
else
  fail "replay (rc $rc, $audits audit rows): $output"
fi
expect_failure "replay with an unreadable --since" "timestamps PostgreSQL reads" \
  "$outbox_binary" replay --db "$db" --schema "$schema" --since "last tuesday-ish" --reason x
expect_failure "replay without --reason" "--reason" \
  "$outbox_binary" replay --db "$db" --schema "$schema" --since 1h
# A filter that matches nothing exits 4, as audit with nothing to audit: not a silent success.
rc=0
output="$("$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --aggregate-id no-such \
  --reason x 2>&1)" || rc=$?
if ((rc == 4)) && [[ "$output" == *"replay: nothing matched"* ]]; then pass; else
  fail "a replay that matches nothing should exit 4 and say so; got $rc: $output"
fi

# --- 10. --log-format json: every line one JSON object, also with a hostile value in it ----------
"$outbox_binary" migrate --db "$db" --schema drilljson >/dev/null
sql -c "INSERT INTO drilljson.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload) VALUES (gen_random_uuid(), E'bad\\ntype\\x1b[2J',
  'a1', 1, 'Placed', '{}')"
rc=0
timeout -s TERM 4 "$outbox_binary" relay --log-format json --db "$db" --schema drilljson \
  --kafka-brokers "$brokers" --max-attempts 1 >/dev/null 2>"$work_dir/json.log" || rc=$?
if python3 -c '
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert lines, "no log lines"
records = [json.loads(line) for line in lines]
assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
assert any("not published" in r["msg"] and r["level"] == "warning" for r in records), records
' "$work_dir/json.log"; then pass; else
  fail "relay --log-format json wrote lines that are not one JSON object each (rc $rc): $(head -c 600 "$work_dir/json.log")"
fi

summary_and_exit
