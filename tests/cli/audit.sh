#!/usr/bin/env bash
# `outbox audit` against what really happened: a relay publishes 30 events, the audit finds them
# all (exit 0); then each finding is made on purpose and the audit must name it: a row marked
# published that never reached the topic (lost, exit 1), a message no transaction committed
# (phantom, put there with kcat), a second copy of an event (duplicated), an event the
# consumer's inbox lacks (not applied). Also the JSON form and a window PostgreSQL cannot read.
# Then `--config outbox.toml` beside that schema: settings from the file, flags and the
# environment over them, and every kind of bad file refused by name.
#
# Usage: audit.sh /path/to/outbox
# Needs: psql, kcat, python3.
set -euo pipefail

readonly outbox_binary="${1:?usage: audit.sh /path/to/outbox}"
readonly schema=audited
readonly topic=outbox.order
readonly startup_timeout_s=30

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init audit outbox-audit

start_postgres
start_kafka_mock
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null

sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload)
  SELECT gen_random_uuid(), 'order', 'o-' || g, 1, 'Placed', '{}' FROM generate_series(1, 30) g"
"$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  >"$work_dir/relay.out" 2>&1 &
relay_pid=$!
track_background "$relay_pid" "outbox relay"
for _ in $(seq 1 300); do
  [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL")" == 0 ]] && break
  sleep 0.1
done
kill -TERM "$relay_pid"
wait "$relay_pid" || true

audit() {
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
    --topic "$topic" --since 1h --from-beginning "$@"
}

# --- 1. all well ---------------------------------------------------------------------------------
rc=0
output="$(audit 2>&1)" || rc=$?
if ((rc == 0)) && [[ "$output" == *"30 row(s) occurred"*"30 published"*"30 message(s) read"* &&
  "$output" == *"lost 0, phantom 0, duplicated 0"* && "$output" == *"audit: ok"* ]]; then
  pass
else
  fail "a clean window: rc $rc: $output"
fi

# --- 2. each finding, made on purpose ------------------------------------------------------------
lost_id=aaaaaaaa-0000-4000-8000-000000000001
phantom_id=bbbbbbbb-0000-4000-8000-000000000002
sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload, published_at)
  VALUES ('$lost_id', 'order', 'o-lost', 1, 'Placed', '{}', now())"
echo '{}' | kcat -P -b "$brokers" -t "$topic" -k o-phantom -H "event_id=$phantom_id"
duplicate_id="$(sql -c "SELECT event_id FROM $schema.outbox_events WHERE aggregate_id = 'o-7'")"
echo '{}' | kcat -P -b "$brokers" -t "$topic" -k o-7 -H "event_id=$duplicate_id"
echo 'not ours' | kcat -P -b "$brokers" -t "$topic" -k stray
# The consumer applied all but o-3's event.
sql -c "INSERT INTO $schema.processed_events (consumer_name, event_id)
  SELECT 'projection', event_id FROM $schema.outbox_events
  WHERE aggregate_id <> 'o-3' AND aggregate_id <> 'o-lost'"
not_applied_id="$(sql -c "SELECT event_id FROM $schema.outbox_events WHERE aggregate_id = 'o-3'")"

rc=0
json="$(audit --consumer projection --json 2>&1)" || rc=$?
if ((rc == 1)) && python3 -c '
import json, sys
r = json.loads(sys.argv[1])
lost, phantom, dup, na = sys.argv[2:6]
assert r["lost"] == [lost], r["lost"]
assert r["phantom"] == [phantom], r["phantom"]
assert [d["event_id"] for d in r["duplicated"]] == [dup], r["duplicated"]
assert sorted(r["not_applied"]) == sorted([na, lost]), r["not_applied"]
assert r["consumer_known"] is True, r
assert r["foreign_messages"] == 1 and r["rows"] == 31 and r["messages"] == 33 and not r["ok"], r
' "$json" "$lost_id" "$phantom_id" "$duplicate_id" "$not_applied_id"; then
  pass
else
  fail "the audit after each finding was made (rc $rc, expected 1): $json"
fi
output="$(audit 2>&1)" || true
if [[ "$output" == *"lost (published, not on the topic): $lost_id"* && "$output" == *"audit: LOSS"* ]]; then
  pass
else
  fail "the text report should name the lost event: $output"
fi

# A misspelt consumer: every event reads as not applied, and the audit says why.
rc=0
output="$(audit --consumer projektion 2>&1)" || rc=$?
if ((rc == 1)) && [[ "$output" == *'warning: consumer "projektion" has no inbox row'* &&
  "$output" == *"not applied by projektion 31"* ]]; then
  pass
else
  fail "a consumer without inbox rows should be warned about: rc $rc: $output"
fi
# The mock cannot look offsets up by time: without --from-beginning the audit says so instead of
# reading nothing and reporting every published event lost.
expect_failure "a broker without offsets by time" "run the audit with --from-beginning" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic "$topic" --since 1h

# --- 3. bad input -----------------------------------------------------------------------------------
expect_failure "an unreadable --since" "timestamps PostgreSQL reads" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic "$topic" --since "the day before" --from-beginning
# Exit 4, apart from an error's 2 or 3: a script can tell "nothing here" from "could not look".
rc=0
output="$("$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic no.such.topic --since 1h --from-beginning --read-timeout 10s 2>&1)" || rc=$?
if ((rc == 4)) && [[ "$output" == *"nothing to audit"* && "$output" != *"audit: ok"* ]]; then
  pass
else
  fail "a topic with nothing to audit: expected exit 4 and \"nothing to audit\", got $rc: $output"
fi
expect_failure "--until before --since" "the window is empty" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic "$topic" --since 1h --until 2h --from-beginning
expect_failure "--read-timeout 0" "give 1s to 1d" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic "$topic" --since 1h --read-timeout 0s --from-beginning
expect_failure "--slack 3650d" "give 0 to 7d" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic "$topic" --since 1h --slack 3650d
sql -c "INSERT INTO $schema.outbox_cleanup_horizon (deleted_before) VALUES (now() - interval '30 minutes')"
expect_failure "a window older than the cleanup horizon" "before the cleanup horizon" \
  "$outbox_binary" audit --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --topic "$topic" --since 1h --from-beginning
sql -c "DELETE FROM $schema.outbox_cleanup_horizon"

# --- 4. --config outbox.toml (here, beside a schema with rows to show) -------------------------------
cat >"$work_dir/outbox.toml" <<TOML
db = "$db"
log-format = "json"
[status]
schema = "$schema"
json = true
[relay]
kafka-brokers = "$brokers"
TOML
output="$("$outbox_binary" --config "$work_dir/outbox.toml" status 2>&1)" || true
if [[ "$output" == "{"*'"published":31'* ]]; then pass; else
  fail "status from the config file: $output"
fi
output="$("$outbox_binary" status --config "$work_dir/outbox.toml" --schema nosuchschema 2>&1)" || true
if [[ "$output" == *nosuchschema* ]]; then pass; else
  fail "a flag should override the file's schema: $output"
fi
sed "s|^db = .*|db = \"host=127.0.0.1 port=1 dbname=nowhere\"|" "$work_dir/outbox.toml" >"$work_dir/env.toml"
output="$(OUTBOX_DATABASE_URL="$db" "$outbox_binary" --config "$work_dir/env.toml" status 2>&1)" || true
if [[ "$output" == "{"*'"published":31'* ]]; then pass; else
  fail "OUTBOX_DATABASE_URL should override the file's db: $output"
fi
printf '[relay]\nkafka-broker = "x"\n' >"$work_dir/typo.toml"
expect_failure "a misspelt key" "[relay] kafka-broker: \`outbox relay\` has no flag --kafka-broker" \
  "$outbox_binary" --config "$work_dir/typo.toml" status
printf '[relays]\nbatch-size = 5\n' >"$work_dir/table.toml"
expect_failure "a table that is no command" "[relays] is not an outbox command" \
  "$outbox_binary" --config "$work_dir/table.toml" status
printf '[relay]\nbatch-size = "lots"\n' >"$work_dir/type.toml"
expect_failure "a value of the wrong type" "batch-size" \
  "$outbox_binary" --config "$work_dir/type.toml" relay --db "$db" --kafka-brokers "$brokers"
printf 'db = "unterminated\n' >"$work_dir/broken.toml"
expect_failure "a file that is not TOML" "not TOML at line 1" \
  "$outbox_binary" --config "$work_dir/broken.toml" status
expect_failure "a file that does not exist" "no-such.toml" \
  "$outbox_binary" --config "$work_dir/no-such.toml" status

summary_and_exit
