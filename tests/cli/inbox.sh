#!/usr/bin/env bash
# `outbox inbox` against what a gap-aware consumer keeps in inbox_parked: list (text and --json,
# parked first, hostile text escaped), release and skip recorded with the audit, refusals that say
# what is wrong and change nothing, and `outbox status` counting held events per consumer. The
# consumer's side of a decision is tested in InboxOrderTest; here the rows are written as a
# consumer writes them.
#
# Usage: inbox.sh /path/to/outbox
# Needs: psql on PATH, PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: inbox.sh /path/to/outbox}"
readonly schema=shop

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init inbox outbox-inbox-test

start_postgres
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
inbox() { "$outbox_binary" inbox --db "$db" --schema "$schema" "$@"; }

readonly waiting_id=01900000-0000-7000-8000-000000000001
readonly failed_id=01900000-0000-7000-8000-000000000002
readonly hostile_id=01900000-0000-7000-8000-000000000003
# held(id, consumer, aggregate, sequence, kind, reason, park_at)
held() {
  sql -c "INSERT INTO $schema.inbox_parked (consumer_name, event_id, aggregate_type, aggregate_id,
    aggregate_sequence, event_type, schema_version, payload, traceparent, topic, partition,
    \"offset\", kind, reason, park_at)
    VALUES ('$2', '$1', 'order', '$3', $4, 'OrderPaid', 1, '\\x7b7d', '', 'orders', 0, 0, '$5',
            \$r\$$6\$r\$, $7)"
}
held "$waiting_id" projection o-1 3 waiting 'waiting for sequence 2 of its aggregate (1 applied)' \
  "now() + interval '5 minutes'"
held "$failed_id" projection o-2 1 failed 'its effect failed 10 times in a row; the last error: boom' \
  "now()"
held "$hostile_id" billing "o-3$(printf '\033')[2J" 2 waiting "$(printf 'evil\033[31m')" \
  "now() - interval '1 second'"

# --- 1. list: parked first, then waiting; escaped; --consumer; --json ----------------------------
out="$(inbox list 2>&1)" || fail "inbox list failed: $out"
first_id="$(head -1 <<<"$out" | cut -d' ' -f1)"
if [[ "$first_id" == "$failed_id" || "$first_id" == "$hostile_id" ]]; then pass; else
  fail "parked events should be listed first: $out"; fi
if [[ "$out" == *"parked (failed)"* && "$out" == *"waiting since"* &&
      "$out" == *"parked (waiting)"* && "$out" == *"3 held event(s), 2 parked"* ]]; then
  pass
else
  fail "inbox list should show each state and count them: $out"
fi
if [[ "$out" != *$'\033'* ]]; then pass; else fail "inbox list printed an escape sequence"; fi
out="$(inbox list --consumer projection --json 2>&1)" || fail "inbox list --json failed: $out"
if [[ "$(wc -l <<<"$out")" == 2 && "$out" == *"\"event_id\":\"$waiting_id\""* &&
      "$out" == *'"kind":"failed"'* && "$out" == *'"parked":true'* ]]; then
  pass
else
  fail "inbox list --consumer projection --json should print its two events: $out"
fi

# --- 2. status counts them per consumer ----------------------------------------------------------
out="$("$outbox_binary" status --db "$db" --schema "$schema" 2>&1)" || fail "status failed: $out"
if [[ "$out" == *"inbox projection: 1 waiting for a predecessor, 1 parked"* &&
      "$out" == *"inbox billing: 0 waiting for a predecessor, 1 parked"* ]]; then
  pass
else
  fail "status should count held events per consumer: $out"
fi
out="$("$outbox_binary" status --db "$db" --schema "$schema" --json 2>&1)"
if [[ "$out" == *'"inbox_held":[{"consumer":"billing","parked":1,"waiting":0}'* ]]; then pass; else
  fail "status --json should list inbox_held: $out"; fi

# --- 3. refusals change nothing ------------------------------------------------------------------
expect_failure "skip without a reason" "--reason is required" \
  inbox skip "$failed_id" --consumer projection
expect_failure "release at the wrong consumer" "is not held by consumer 'billing'" \
  inbox release "$failed_id" --consumer billing
expect_failure "release without --consumer" "--consumer is required" inbox release "$failed_id"
expect_failure "a hostile reason" "the audit record takes one line of printable text" \
  inbox skip "$failed_id" --consumer projection --reason "$(printf 'a\nb')"
expect_failure "not an event id" "not an event id" \
  inbox release not-a-uuid --consumer projection
if [[ "$(sql -c "SELECT count(*) FROM $schema.inbox_parked WHERE decision IS NOT NULL")" == 0 &&
      "$(sql -c "SELECT count(*) FROM $schema.outbox_operator_audit")" == 0 ]]; then
  pass
else
  fail "a refused decision changed a row or wrote an audit record"
fi

# --- 4. release and skip are recorded for the consumer, with the audit ---------------------------
out="$(inbox release "$waiting_id" --consumer projection --actor alice --reason 'sequence 2 was skipped at the source' 2>&1)" ||
  fail "inbox release failed: $out"
if [[ "$out" == "released $waiting_id at consumer 'projection': recorded"* ]]; then pass; else
  fail "release should say what it recorded: $out"; fi
out="$(inbox skip "$failed_id" --consumer projection --actor bob --reason 'poison payload' 2>&1)" ||
  fail "inbox skip failed: $out"
audit="$(sql -c "SELECT string_agg(action || ' ' || actor || ' ' || consumer_name || ' ' || reason, '; '
  ORDER BY audit_id) FROM $schema.outbox_operator_audit")"
if [[ "$audit" == "inbox_release alice projection sequence 2 was skipped at the source; inbox_skip bob projection poison payload" ]]; then
  pass
else
  fail "the audit should record both decisions: $audit"
fi
decisions="$(sql -c "SELECT string_agg(decision || ' ' || decided_by, ', ' ORDER BY decision)
  FROM $schema.inbox_parked WHERE consumer_name = 'projection'")"
if [[ "$decisions" == "release alice, skip bob" ]]; then pass; else
  fail "the rows should carry the decisions for the consumer: $decisions"; fi
out="$(inbox list --consumer projection 2>&1)"
if [[ "$out" == *"release by alice pending"* ]]; then pass; else
  fail "list should show a decision not yet carried out: $out"; fi
expect_failure "a second decision" "already has a decision" \
  inbox skip "$waiting_id" --consumer projection --reason again

summary_and_exit
