#!/usr/bin/env bash
# The admin page in Debian's headless Chromium: `outbox admin` serves it; the page lists two
# quarantined events (one with a hostile aggregate type, shown as text); a click on retry
# releases one in PostgreSQL, a click on skip (with the reason the page asks for) skips the
# other; both are audited with the page as actor. A screenshot goes to the test's artefacts.
# The actions need the listener's token (the page's form takes it); without one the page is
# read-only, and without one the listener answers only to loopback host names. The headline
# turns green with a relay at work and red when it stops with an event pending, in those colours
# (a pixel of it read back from Chromium's drawing).
#
# Usage: admin_page.sh /path/to/outbox ARTEFACT_DIR
# Needs: psql, curl, chromium, chromium-driver, python3-selenium, python3-pil (Debian's
# /usr/bin/python3).
set -euo pipefail

readonly outbox_binary="${1:?usage: admin_page.sh /path/to/outbox ARTEFACT_DIR}"
readonly artefacts="${2:?usage: admin_page.sh /path/to/outbox ARTEFACT_DIR}"
readonly schema=page
readonly startup_timeout_s=30

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init admin_page outbox-admin-page

for tool in chromium chromedriver curl psql; do
  command -v "$tool" >/dev/null || fatal "$tool is not installed (scripts/install-deps.sh installs it)"
done
/usr/bin/python3 -c 'import selenium' 2>/dev/null ||
  fatal "python3-selenium is not installed (scripts/install-deps.sh installs it)"
/usr/bin/python3 -c 'import PIL' 2>/dev/null ||
  fatal "python3-pil is not installed (scripts/install-deps.sh installs it)"
mkdir -p "$artefacts"

start_postgres
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null

# Two quarantined heads, each with a successor waiting behind it.
quarantine() {
  sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
    aggregate_sequence, event_type, payload, available_at, quarantined_at, quarantine_reason,
    attempt_count, last_error) VALUES
    ('$1', '$2', '$3', 1, 'Placed', '{}', 'infinity', now(), 'permanent failure', 1, 'too large'),
    (gen_random_uuid(), '$2', '$3', 2, 'Placed', '{}', now(), NULL, NULL, 0, NULL)"
}
retry_id=11111111-1111-4111-8111-111111111111
skip_id=22222222-2222-4222-8222-222222222222
quarantine "$retry_id" order o-1
# Its id has an escape sequence, a bell and a right-to-left override: shown escaped, as the CLI does.
quarantine "$skip_id" '<b class="injected">x</b>' "c-1$(printf '\033[31m\a\342\200\256')evil"

# An event in doubt (the HTTP sink's reconcile mode): listed under "In doubt", not pending.
in_doubt_id=33333333-3333-4333-8333-333333333333
sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload, available_at, in_doubt_at, in_doubt_reason,
  attempt_count) VALUES ('$in_doubt_id', 'payment', 'p-1', 1, 'Charged', '{}', 'infinity', now(),
  'no status after the request was sent: Operation timed out', 1)"

# An event a gap-aware consumer parked (as the consumer writes it): under "Held by consumers".
held_id=44444444-4444-4444-8444-444444444444
sql -c "INSERT INTO $schema.inbox_parked (consumer_name, event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, schema_version, payload, traceparent, topic, partition,
  \"offset\", kind, reason, park_at) VALUES ('projection', '$held_id', 'order', 'o-9', 2,
  'OrderPaid', 1, '\\x7b7d', '', 'outbox.order', 0, 0, 'failed',
  'its effect failed 10 times in a row; the last error: boom', now())"

# A slot no relay streams: the page lists it as such (admin_page.py).
sql -c "SELECT pg_create_logical_replication_slot('left_behind', 'pgoutput')" >/dev/null

# Starts `outbox admin` with extra flags; sets started_port to the port it serves on. (Not in a
# command substitution: the process must be tracked by this shell for the cleanup.)
start_admin() {
  local log="$work_dir/admin-$RANDOM.out" pid
  "$outbox_binary" admin --db "$db" --schema "$schema" --listen 127.0.0.1:0 \
    --backlog-refresh 500ms "$@" >"$log" 2>&1 &
  pid=$!
  track_background "$pid" "outbox admin"
  started_pid="$pid"
  started_port="$(listening_port "$log" "$pid")" ||
    fatal --log "$log" "outbox admin did not say where it serves"
}
token="$(openssl rand -hex 24)"
printf '%s\n' "$token" >"$work_dir/token"
chmod 600 "$work_dir/token"
start_admin
open_port="$started_port"
start_admin --admin-token-file "$work_dir/token"
port="$started_port"
token_admin_pid="$started_pid"
post() {  # post PORT PATH BODY [curl args...]: prints the status code
  local p="$1" path="$2" body="$3"
  shift 3
  curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "$@" \
    -d "$body" "http://127.0.0.1:$p$path"
}

# --- what another site's page, or another local user, could send -------------------------------
code="$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: attacker.example' \
  "http://127.0.0.1:$open_port/api/overview")"
if [[ "$code" == 403 ]]; then pass; else fail "a foreign Host header answered $code, not 403"; fi
code="$(post "$open_port" /api/quarantine/skip "{\"event_id\":\"$skip_id\",\"reason\":\"x\"}" \
  -H 'X-Outbox-Admin: 1')"
if [[ "$code" == 403 ]]; then pass; else fail "an action without a configured token answered $code, not 403"; fi
code="$(post "$port" /api/quarantine/retry "{\"event_id\":\"$retry_id\"}" -H 'X-Outbox-Admin: 1')"
if [[ "$code" == 401 ]]; then pass; else fail "an action without the bearer token answered $code, not 401"; fi
code="$(post "$port" /api/quarantine/retry "{\"event_id\":\"$retry_id\"}" \
  -H "Authorization: Bearer $token")"
if [[ "$code" == 400 ]]; then pass; else fail "a POST without X-Outbox-Admin answered $code, not 400"; fi
code="$(post "$port" /api/quarantine/retry '{"event_id":"x"}' -H 'X-Outbox-Admin: 1' \
  -H "Authorization: Bearer $token")"
if [[ "$code" == 400 ]]; then pass; else fail "a bad event id answered $code, not 400"; fi
if [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE quarantined_at IS NOT NULL")" == 2 ]]; then
  pass
else
  fail "a refused request changed the quarantine"
fi

# --- the page in Chromium -------------------------------------------------------------------------
if /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/admin_page.py" "http://127.0.0.1:$port/" \
  "$token" "$retry_id" "$skip_id" "$artefacts/admin-page.png" "http://127.0.0.1:$open_port/" \
  "$in_doubt_id" "$held_id" \
  >"$work_dir/browser.log" 2>&1; then
  pass
else
  show_log "the browser session" "$work_dir/browser.log"
  fail "the page did not retry and skip as clicked"
fi
if [[ -s "$artefacts/admin-page.png" ]]; then pass; else fail "no screenshot in $artefacts"; fi

released="$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE event_id = '$retry_id'
  AND quarantined_at IS NULL AND available_at <= now() AND published_at IS NULL")"
if [[ "$released" == 1 ]]; then pass; else fail "retry did not release the event in PostgreSQL"; fi
skipped="$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE event_id = '$skip_id'
  AND skipped_at IS NOT NULL")"
if [[ "$skipped" == 1 ]]; then pass; else fail "skip did not skip the event in PostgreSQL"; fi
audit="$(sql -c "SELECT string_agg(action || ':' || reason, ',' ORDER BY action) FROM
  $schema.outbox_operator_audit WHERE actor LIKE 'admin page (%'")"
if [[ "$audit" == "retry:released from quarantine,skip:customer deleted; event obsolete" ]]; then
  pass
else
  fail "the audit reads: $audit"
fi

# The event in doubt, settled by hand (it would keep the headline amber).
if "$outbox_binary" reconcile --db "$db" --schema "$schema" skip "$in_doubt_id" --actor ops \
  --reason "refunded by hand" | grep -q "1 of 1 event(s) settled as skip"; then
  pass
else
  fail "reconcile skip did not settle the event in doubt"
fi

# --- the headline: green with a relay at work, red once it is stopped with an event pending ------
verdict() {  # verdict STATE: the page's headline turns STATE, in that state's colour
  if /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/admin_verdict.py" "http://127.0.0.1:$port/" \
    "$token" "$1" "$artefacts/admin-page-$1.png" >"$work_dir/verdict-$1.log" 2>&1; then
    pass
  else
    show_log "the browser session" "$work_dir/verdict-$1.log"
    fail "the headline did not turn $1"
  fi
}
sql -c "SELECT pg_drop_replication_slot('left_behind')" >/dev/null
# The parked event, skipped as its consumer would after `outbox inbox skip` (no consumer runs
# here): it too keeps the headline amber while it is there.
sql -c "DELETE FROM $schema.inbox_parked WHERE event_id = '$held_id'" >/dev/null
"$outbox_binary" relay --db "$db" --schema "$schema" --sink discard >"$work_dir/relay.out" 2>&1 &
relay_pid=$!
track_background "$relay_pid" "outbox relay"
verdict healthy
if grep -q "1 relay(s) running; nothing pending" "$work_dir/verdict-healthy.log"; then pass; else
  fail "the healthy headline says: $(cat "$work_dir/verdict-healthy.log")"
fi
kill -TERM "$relay_pid"
wait "$relay_pid" || true
sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload) VALUES (gen_random_uuid(), 'order', 'o-9', 1, 'Placed', '{}')"
verdict stalled
if grep -q "1 event pending and no relay running" "$work_dir/verdict-stalled.log"; then pass; else
  fail "the stalled headline says: $(cat "$work_dir/verdict-stalled.log")"
fi

# --- SIGTERM stops it in order: exit 0 (before: a server thread took the signal, status 143) ---
kill -TERM "$token_admin_pid"
admin_rc=0
wait "$token_admin_pid" || admin_rc=$?
if ((admin_rc == 0)); then pass; else fail "outbox admin exited $admin_rc after SIGTERM, not 0"; fi

summary_and_exit
