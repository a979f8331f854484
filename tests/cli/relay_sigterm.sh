#!/usr/bin/env bash
# End-to-end test of the `outbox` command line as an operator uses it: a private PostgreSQL and
# the Kafka mock cluster as separate processes, migrate, events written by plain SQL (as the
# producer writes them), a relay publishing them, then SIGTERM: the relay must drain, print its
# totals and exit 0. Also the error paths an operator hits first (bad schema, missing brokers,
# unreachable database).
#
# Usage: relay_sigterm.sh /path/to/outbox
# Needs: psql on PATH, PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: relay_sigterm.sh /path/to/outbox}"
readonly schema=clitest
readonly relay_id=cli-relay
readonly aggregates=4
readonly events_per_aggregate=5
readonly expected_events=$((aggregates * events_per_aggregate))
readonly startup_timeout_s=30
readonly publish_timeout_s=60
readonly sigterm_exit_timeout_s=15

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init relay_sigterm outbox-cli-test

# --- 1. PostgreSQL and the Kafka mock cluster -----------------------------------------------------
# relay.out is created before anything reads it; start_postgres and start_kafka_mock create their
# own output files before polling them.
: >"$work_dir/relay.out"
start_postgres
pass
start_kafka_mock --brokers 3
pass

# --- 2. migrate, twice ------------------------------------------------------------------------------
rc=0
output="$("$outbox_binary" migrate --db "$db" --schema "$schema" 2>&1)" || rc=$?
if ((rc != 0)); then
  fatal "first migrate exited $rc: $output"
elif [[ "$output" =~ \(([0-9]+)\ migration\(s\)\ applied\) ]] && ((BASH_REMATCH[1] >= 1)); then
  pass
else
  fatal "first migrate should report >= 1 migration(s) applied; it printed: $output"
fi

rc=0
output="$("$outbox_binary" migrate --db "$db" --schema "$schema" 2>&1)" || rc=$?
if ((rc == 0)) && [[ "$output" == *"(0 migration(s) applied)"* ]]; then
  pass
else
  fail "second migrate should exit 0 and report \"0 migration(s) applied\"; exit $rc, output: $output"
fi

# --- 3. events, written the way the producer writes them: rows and sequences in one transaction ----
if ! output="$(sql 2>&1 <<SQL
BEGIN;
INSERT INTO $schema.outbox_events
  (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type, payload)
SELECT gen_random_uuid(), 'order', 'order-' || a, s, 'OrderStepped',
       jsonb_build_object('order', a, 'step', s)
FROM generate_series(1, $aggregates) AS a, generate_series(1, $events_per_aggregate) AS s
ORDER BY a, s;
INSERT INTO $schema.outbox_aggregate_sequences (aggregate_type, aggregate_id, last_sequence)
SELECT 'order', 'order-' || a, $events_per_aggregate FROM generate_series(1, $aggregates) AS a;
COMMIT;
SQL
)"; then
  fatal "inserting $expected_events events with psql failed: $output"
fi
inserted="$(sql -c "SELECT count(*) FROM $schema.outbox_events")"
if [[ "$inserted" == "$expected_events" ]]; then
  pass
else
  fatal "expected $expected_events rows in $schema.outbox_events after the insert, found $inserted"
fi

# --- 4. the relay publishes everything ----------------------------------------------------------
"$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --relay-id "$relay_id" >"$work_dir/relay.out" 2>"$work_dir/relay.err" &
relay_pid=$!
track_background "$relay_pid"

published=""
status_line=""
deadline=$((SECONDS + publish_timeout_s))
while ((SECONDS < deadline)); do
  status_line="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || true
  if [[ "$status_line" =~ published\ ([0-9]+) ]]; then
    published="${BASH_REMATCH[1]}"
    if ((published == expected_events)); then break; fi
  fi
  if ! kill -0 "$relay_pid" 2>/dev/null; then break; fi
  sleep 0.2
done
if [[ "$published" == "$expected_events" ]]; then
  pass
else
  show_log "relay stderr" "$work_dir/relay.err"
  fail "outbox status should reach \"published $expected_events\" within ${publish_timeout_s} s;" \
    "last status: $status_line"
fi

row_check="$(sql -F ' ' -c "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                                  count(*) FILTER (WHERE claimed_by LIKE '$relay_id:%'),
                                  count(*)
                           FROM $schema.outbox_events")"
if [[ "$row_check" == "$expected_events $expected_events $expected_events" ]]; then
  pass
else
  fail "every row should have published_at set and claimed_by like '$relay_id:%';" \
    "(published, claimed by $relay_id, total) = ($row_check), expected all $expected_events"
fi

# --- 5. SIGTERM: drain, print totals, exit 0 --------------------------------------------------------
if kill -0 "$relay_pid" 2>/dev/null; then
  kill -TERM "$relay_pid"
  sigterm_start=$SECONDS
  deadline=$((SECONDS + sigterm_exit_timeout_s))
  while kill -0 "$relay_pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.1
  done
  if kill -0 "$relay_pid" 2>/dev/null; then
    show_log "relay stderr" "$work_dir/relay.err"
    fail "the relay was still running ${sigterm_exit_timeout_s} s after SIGTERM"
    # cleanup() will TERM/KILL it; skip the exit-status checks that cannot be answered.
  else
    relay_rc=0
    wait "$relay_pid" || relay_rc=$?
    if ((relay_rc == 0)); then
      pass
    else
      how="exited $relay_rc"
      if ((relay_rc > 128)); then how="$how (killed by signal $((relay_rc - 128)))"; fi
      show_log "relay stderr" "$work_dir/relay.err"
      fail "the relay should exit 0 after SIGTERM; it $how after $((SECONDS - sigterm_start)) s"
    fi
    if grep -q "published $expected_events\b" "$work_dir/relay.out"; then
      pass
    else
      fail "the relay's stdout should contain \"published $expected_events\"; it was:" \
        "$(cat "$work_dir/relay.out")"
    fi
  fi
else
  relay_rc=0
  wait "$relay_pid" || relay_rc=$?
  show_log "relay stderr" "$work_dir/relay.err"
  fail "the relay exited on its own (status $relay_rc) before SIGTERM was sent"
fi

# --- 6. error paths -------------------------------------------------------------------------------
expect_failure "migrate with --schema 'Bad-Name'" "invalid schema name" \
  "$outbox_binary" migrate --db "$db" --schema 'Bad-Name'
expect_failure "relay without --kafka-brokers" "--kafka-brokers" \
  "$outbox_binary" relay --db "$db" --schema "$schema"
expect_failure "migrate against an unreachable database" "cannot connect" \
  "$outbox_binary" migrate --db "host=/nonexistent port=1"


# --- 7. quarantine commands ------------------------------------------------------------------------
# A row set aside as the relay would after a permanent failure, then listed and skipped. Its
# last error carries terminal escapes (clear screen, set the window title, ring the bell), as any
# writer of the table could leave: the listing must show them escaped, never send them.
sql -c "UPDATE ${schema}.outbox_events SET published_at = NULL, quarantined_at = now(),
       quarantine_reason = 'permanent failure',
       last_error = E'permanent_failure: too large \\x1b[2J\\x1b]0;owned\\x07',
       available_at = 'infinity'
     WHERE aggregate_id = (SELECT min(aggregate_id) FROM ${schema}.outbox_events)
       AND aggregate_sequence = 5" >/dev/null
poison_id="$(sql -c "SELECT event_id FROM ${schema}.outbox_events WHERE quarantined_at IS NOT NULL")"
list_output="$("$outbox_binary" quarantine --db "$db" --schema "$schema" list 2>&1)" || true
if [[ "$list_output" == *"$poison_id"*"permanent failure"*"1 quarantined event(s)"* ]]; then
  pass
else
  fail "quarantine list should show $poison_id as a permanent failure; output: $list_output"
fi
if [[ "$list_output" != *$'\e'* && "$list_output" != *$'\a'* &&
      "$list_output" == *'too large \x1b[2J\x1b]0;owned\x07'* ]]; then
  pass
else
  fail "quarantine list must show the escapes of last_error escaped; output: $(printf '%q' "$list_output")"
fi
expect_failure "quarantine skip without --reason" "--reason" \
  "$outbox_binary" quarantine --db "$db" --schema "$schema" skip --actor ci "$poison_id"
expect_failure "quarantine skip of a malformed id" "is not an event id" \
  "$outbox_binary" quarantine --db "$db" --schema "$schema" skip --actor ci --reason r not-a-uuid
if "$outbox_binary" quarantine --db "$db" --schema "$schema" skip --actor ci \
     --reason "cli test" "$poison_id" >/dev/null 2>&1 &&
   [[ "$(sql -c "SELECT count(*) FROM ${schema}.outbox_operator_audit
              WHERE action = 'skip' AND actor = 'ci' AND reason = 'cli test'")" == "1" ]]; then
  pass
else
  fail "quarantine skip of $poison_id should succeed and leave one audit row"
fi

# --- 8. cleanup ---------------------------------------------------------------------------------------
# Everything is finished now (published, or the one skipped); nothing is older than an hour yet.
cleanup_output="$("$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 1h 2>&1)" || true
if [[ "$cleanup_output" == *"nothing to delete: no event finished more than 1h ago"* &&
      "$cleanup_output" != *"batch"* ]]; then
  pass
else
  fail "cleanup with nothing older than the retention should say there is nothing to delete; output: $cleanup_output"
fi
sql -c "UPDATE ${schema}.outbox_events SET published_at = published_at - interval '2 hours',
                                           skipped_at = skipped_at - interval '2 hours'" >/dev/null
cleanup_output="$("$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 1h \
  --batch-size 7 --dry-run 2>&1)" || true
remaining="$(sql -c "SELECT count(*) FROM ${schema}.outbox_events")"
if [[ "$cleanup_output" == *"would delete $expected_events event(s)"* && "$remaining" == "$expected_events" ]]; then
  pass
else
  fail "a dry run should count $expected_events and delete nothing; output: $cleanup_output;" \
    "rows left: $remaining"
fi
cleanup_output="$("$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 1h \
  --batch-size 7 --json 2>&1)" || true
remaining="$(sql -c "SELECT count(*) FROM ${schema}.outbox_events")"
if [[ "$cleanup_output" == *"\"events_deleted\":$expected_events"* && "$remaining" == "0" ]]; then
  pass
else
  fail "cleanup should delete all $expected_events finished events; output: $cleanup_output;" \
    "rows left: $remaining"
fi
expect_failure "cleanup with --retention 7x" "unknown unit \"x\"" \
  "$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 7x
expect_failure "cleanup with an inbox retention shorter than the event retention" "applied twice" \
  "$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 7d --inbox-retention 1d

summary_and_exit
