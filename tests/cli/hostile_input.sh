#!/usr/bin/env bash
# The `outbox` command line against a hostile or careless user: every input of the hardening
# issue's list that reaches the CLI, each with what it must get (a clear refusal, no echoed
# secret, no hang, no spin). docs/GUARANTEES.md ("Hostile inputs") lists them with this test.
#
# Usage: hostile_input.sh /path/to/outbox
# Needs: psql on PATH, PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: hostile_input.sh /path/to/outbox}"
readonly schema=hostile
readonly startup_timeout_s=30
# Planted secrets: no output of any command below may contain them.
readonly db_secret="Planted-Db-Secret-7f3a"
readonly kafka_secret="Planted-Kafka-Secret-91c2"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init hostile_input outbox-hostile-test

all_output="$work_dir/all-output.log"
: >"$all_output"

# run_collect OUTFILE TIMEOUT COMMAND...: runs COMMAND with a time limit, its stdout and stderr
# into OUTFILE and appended to all_output (searched for secrets at the end); sets rc.
run_collect() {
  local out="$1" limit="$2"
  shift 2
  rc=0
  timeout --kill-after=10 "$limit" "$@" >"$out" 2>&1 || rc=$?
  cat "$out" >>"$all_output"
}

# expect_refusal DESCRIPTION EXPECTED COMMAND...: a non-zero exit within 30 s whose output holds
# EXPECTED and no "terminate called" (an uncaught exception).
expect_refusal() {
  local description="$1" expected="$2"
  shift 2
  run_collect "$work_dir/out" 30 "$@"
  local output
  output="$(cat "$work_dir/out")"
  if ((rc == 0)); then
    fail "$description: expected a refusal, exit 0; output: $output"
  elif ((rc == 124 || rc == 137)); then
    fail "$description: still running after 30 s"
  elif [[ "$output" != *"$expected"* ]]; then
    fail "$description: exit $rc, output lacks \"$expected\": $output"
  elif [[ "$output" == *"terminate called"* ]]; then
    fail "$description: an uncaught exception: $output"
  else
    pass
  fi
}

# --- servers --------------------------------------------------------------------------------------
start_postgres
start_kafka_mock --brokers 010
port="$(psql "$db" -X -q -A -t -c "SHOW port")"
# Least privilege from the command line: the roles exist and a writer cannot read payloads.
output="$("$outbox_binary" migrate --db "$db" --schema "$schema" --create-roles 2>&1)" || true
if [[ "$output" == *"roles ${schema}_writer, ${schema}_relay, ${schema}_inbox, ${schema}_admin"* ]] &&
   ! psql "$db options='-c role=${schema}_writer'" -X -q -c "SELECT payload FROM $schema.outbox_events" >/dev/null 2>&1; then
  pass
else
  fail "migrate --create-roles should create the four roles, the writer unable to read payloads: $output"
fi

# --- numbers are decimal: 010 brokers are ten, not eight ------------------------------------------
broker_count="$(tr ',' '\n' <<<"$brokers" | grep -c .)"
if ((broker_count == 10)); then pass; else fail "kafka-mock --brokers 010 started $broker_count brokers, not 10"; fi
expect_refusal "a hexadecimal number" "whole decimal number" \
  "$outbox_binary" relay --db "$db" --kafka-brokers "$brokers" --max-attempts 0x10
# kafka-mock says what it forgets.
if grep -q "at most 5 MiB" "$work_dir/kafka.err"; then pass; else fail "kafka-mock should state its 5 MiB per partition limit"; fi
# kafka-mock refuses what a real cluster refuses (it started with an internal topic before).
expect_refusal "kafka-mock --topic __consumer_offsets" "internal topics" \
  "$(dev_binary)" kafka-mock --topic __consumer_offsets
expect_refusal "kafka-mock --topic with a space" "has the byte 0x20" \
  "$(dev_binary)" kafka-mock --topic "a b"
# --help shows the defaults.
help="$("$outbox_binary" relay --help)"
if [[ "$help" == *"=500"* && "$help" == *"=30000"* ]]; then pass; else fail "relay --help should show the defaults (batch 500, lease 30000): $help"; fi

# --- the embedded cluster takes no one without its password -----------------------------------------
if [[ "$db" == *passfile=* && "$db" != *password=* ]]; then pass; else fail "the connection string should name a passfile, not hold a password: $db"; fi
intruder="host=127.0.0.1 port=$port user=postgres dbname=outbox"
if PGPASSFILE=/nonexistent psql "$intruder" -X -c "COPY (SELECT 1) TO PROGRAM 'touch $work_dir/owned'" \
     >"$work_dir/intruder.out" 2>&1; then
  fail "a connection without the password was let in: $(cat "$work_dir/intruder.out")"
elif [[ -e "$work_dir/owned" ]]; then
  fail "a program ran through COPY TO PROGRAM"
else
  pass
fi
if [[ "$(id -u)" == 0 ]] && command -v runuser >/dev/null; then
  # The report's exact attack: another OS user, over TCP, as superuser.
  if runuser -u nobody -- env HOME=/nonexistent psql "$intruder" -X -c "SELECT 1" >/dev/null 2>&1; then
    fail "OS user nobody logged in to the embedded cluster"
  else
    pass
  fi
fi

# --- secrets are never printed ----------------------------------------------------------------------
unreachable="postgresql://app:${db_secret}@127.0.0.1:1/outbox?connect_timeout=2"
for command in "status" "quarantine" "cleanup" "migrate"; do
  # shellcheck disable=SC2046  # quarantine's options come before its subcommand
  run_collect "$work_dir/out" 30 "$outbox_binary" $command --db "$unreachable" $([[ $command == quarantine ]] && echo list)
  if ((rc != 0)) && grep -q "cannot connect" "$work_dir/out"; then pass; else fail "$command against an unreachable database: exit $rc: $(cat "$work_dir/out")"; fi
done
# A misplaced argument is quoted back by the parser: without its password. (A flag of a parent
# command after a subcommand is taken by the parent: `quarantine list --db URL` works.)
run_collect "$work_dir/out" 30 "$outbox_binary" quarantine list "$unreachable"
if ((rc != 0)) && grep -q "not expected" "$work_dir/out"; then pass; else fail "a stray connection string should be a parse error: $(cat "$work_dir/out")"; fi
# A wrong password is refused at once, not retried forever (the relay used to).
wrong="postgresql://postgres:${db_secret}@127.0.0.1:${port}/outbox"
run_collect "$work_dir/out" 30 "$outbox_binary" relay --db "$wrong" --schema "$schema" --sink discard
if ((rc == 2)) && grep -q "password authentication failed" "$work_dir/out"; then pass; else fail "relay with a wrong password: exit $rc (124: still retrying after 30 s): $(cat "$work_dir/out")"; fi
run_collect "$work_dir/out" 30 "$outbox_binary" relay --db "${db/dbname=outbox/dbname=no_such_db}" --sink discard
if ((rc == 2)) && grep -q "does not exist" "$work_dir/out"; then pass; else fail "relay against an unknown database: exit $rc: $(cat "$work_dir/out")"; fi
# From a file instead of the command line: the password file wins over nothing, and works.
printf '%s\n' "$db_secret" >"$work_dir/pw"
chmod 600 "$work_dir/pw"
run_collect "$work_dir/out" 30 "$outbox_binary" status --db "host=127.0.0.1 port=$port user=postgres dbname=outbox" --db-password-file "$work_dir/pw" --schema "$schema"
if ((rc == 2)) && grep -q "password authentication failed" "$work_dir/out"; then pass; else fail "status with a password file: exit $rc: $(cat "$work_dir/out")"; fi
# Kafka secrets: misspelt on the command line, and in a properties file with a stats line.
run_collect "$work_dir/out" 30 "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --kafka-property "sasl.pasword=${kafka_secret}"
if ((rc == 2)) && grep -q "sasl.pasword" "$work_dir/out"; then pass; else fail "a misspelt Kafka property should be refused: $(cat "$work_dir/out")"; fi
printf '# secrets\nsasl.username=outbox\nsasl.password=%s\nsecurity.protocol=plaintext\n' "$kafka_secret" >"$work_dir/kafka.properties"
chmod 600 "$work_dir/kafka.properties"
run_collect "$work_dir/out" 8 "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" \
  --kafka-properties-file "$work_dir/kafka.properties" --stats-every 1s
if grep -q "health running" "$work_dir/out"; then pass; else fail "relay with a properties file should run and print stats: $(cat "$work_dir/out")"; fi

# --- properties that weaken a guarantee --------------------------------------------------------------
for property in partitioner=random transactional.id=x acks=1 enable.idempotence=false \
  queuing.strategy=lifo message.timeout.ms=0 message.timeout.ms=30000; do
  expect_refusal "--kafka-property $property" "is refused" \
    "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --kafka-property "$property"
done

# --- fault injection is for tests, and says so when misused ------------------------------------------
expect_refusal "OUTBOX_FAULTS malformed" "OUTBOX_FAULTS entry" \
  env OUTBOX_FAULTS=garbage "$outbox_binary" status --db "$db" --schema "$schema"
expect_refusal "OUTBOX_FAULTS with a misspelt point" "no fault point \"relay.after_clam\"" \
  env OUTBOX_FAULTS=relay.after_clam=kill "$outbox_binary" status --db "$db" --schema "$schema"

# --- durations ----------------------------------------------------------------------------------------
expect_refusal "--stats-every 200000d" "at most 3650d" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink discard --stats-every 200000d
# A byte budget of terabytes parses as a byte size; the relay refuses it before it reaches the SQL.
expect_refusal "--max-in-flight-bytes 2048GiB" "at most 1 TiB" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink discard --max-in-flight-bytes 2048GiB
expect_refusal "admin --backlog-refresh 3650d" "give 100ms to 1h" \
  "$outbox_binary" admin --db "$db" --schema "$schema" --listen 127.0.0.1:0 --backlog-refresh 3650d
expect_refusal "relay --backlog-refresh 50ms" "give 100ms to 1h" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink discard \
  --metrics-listen 127.0.0.1:0 --backlog-refresh 50ms
expect_refusal "cleanup --every 200000d" "at most 3650d" \
  "$outbox_binary" cleanup --db "$db" --schema "$schema" --every 200000d
expect_refusal "cleanup --retention 0" "below the minimum" \
  "$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 0

# --- a schema never migrated: the error says what to run ----------------------------------------------
expect_refusal "quarantine list in a schema never migrated" "run \`outbox migrate\`" \
  "$outbox_binary" quarantine --db "$db" --schema never_migrated list
expect_refusal "status in a schema never migrated" "outbox migrate" \
  "$outbox_binary" status --db "$db" --schema never_migrated

# --- quarantine retry of one id given twice ----------------------------------------------------------
poison="$(sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload, quarantined_at, quarantine_reason, available_at)
  VALUES (gen_random_uuid(), 'order', 'q1', 1, 'X', '{}', now(), 'permanent failure', 'infinity')
  RETURNING event_id")"
run_collect "$work_dir/out" 30 "$outbox_binary" quarantine --db "$db" --schema "$schema" retry --actor ci "$poison" "$poison"
if ((rc == 0)) && grep -q "1 of 1 event(s) released" "$work_dir/out"; then pass; else fail "retry ID ID: exit $rc: $(cat "$work_dir/out")"; fi
# A retry that releases nothing says why, per id: pending (released above), published, unknown.
unknown="0190f5c2-7d3e-7a41-9c7e-2b1d4e5f6a7b"
run_collect "$work_dir/out" 30 "$outbox_binary" quarantine --db "$db" --schema "$schema" retry --actor ci "$poison" "$unknown"
if ((rc == 1)) && grep -q "0 of 2 event(s) released" "$work_dir/out" &&
  grep -q "not released: $poison: pending, not quarantined" "$work_dir/out" &&
  grep -q "not released: $unknown: not found" "$work_dir/out"; then pass; else fail "retry of nothing quarantined: exit $rc: $(cat "$work_dir/out")"; fi
# One of two released: only the other is explained.
sql -c "UPDATE $schema.outbox_events SET quarantined_at = now(), available_at = 'infinity'
  WHERE event_id = '$poison'" >/dev/null
run_collect "$work_dir/out" 30 "$outbox_binary" quarantine --db "$db" --schema "$schema" retry --actor ci "$poison" "$unknown"
if ((rc == 1)) && grep -q "1 of 2 event(s) released" "$work_dir/out" &&
  ! grep -q "not released: $poison" "$work_dir/out" &&
  grep -q "not released: $unknown: not found" "$work_dir/out"; then pass; else fail "retry of one of two: exit $rc: $(cat "$work_dir/out")"; fi
sql -c "UPDATE $schema.outbox_events SET published_at = now()" >/dev/null
run_collect "$work_dir/out" 30 "$outbox_binary" quarantine --db "$db" --schema "$schema" retry --actor ci "$poison"
if ((rc == 1)) && grep -Eq "not released: $poison: published at [0-9-]+ [0-9:]+Z" "$work_dir/out"; then pass; else fail "retry of a published event: exit $rc: $(cat "$work_dir/out")"; fi

# --- a held lock: commands give up with a clear error; the relay still stops on SIGTERM ---------------
(
  echo "BEGIN; LOCK TABLE $schema.outbox_events IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(60); COMMIT;" |
    psql "$db" -X -q >/dev/null 2>&1
) &
locker_pid=$!
track_background "$locker_pid" "the lock holder"
for _ in $(seq 50); do
  [[ "$(sql -c "SELECT count(*) FROM pg_locks WHERE mode = 'AccessExclusiveLock' AND granted
                AND relation = '$schema.outbox_events'::regclass")" == 1 ]] && break
  sleep 0.1
done
for command in "status" "quarantine" "cleanup --dry-run"; do
  # shellcheck disable=SC2086,SC2046
  run_collect "$work_dir/out" 30 "$outbox_binary" $command --db "$db" --schema "$schema" $([[ $command == quarantine ]] && echo list)
  if ((rc == 2)) && grep -q "holds a lock" "$work_dir/out"; then pass; else fail "$command behind a held lock: exit $rc (124: hung 30 s): $(cat "$work_dir/out")"; fi
done
"$outbox_binary" relay --db "$db" --schema "$schema" --sink discard >"$work_dir/relay.out" 2>&1 &
relay_pid=$!
track_background "$relay_pid" "relay behind the lock"
sleep 2
kill -TERM "$relay_pid"
stop_started=$SECONDS
while kill -0 "$relay_pid" 2>/dev/null && ((SECONDS - stop_started < 20)); do sleep 0.1; done
if kill -0 "$relay_pid" 2>/dev/null; then
  fail "the relay behind a held lock still ran 20 s after SIGTERM"
else
  pass
fi
kill "$locker_pid" 2>/dev/null || true
sql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()" >/dev/null

# --- SIGHUP drains like SIGTERM; a closed stdout does not kill the relay -------------------------------
"$outbox_binary" relay --db "$db" --schema "$schema" --sink discard --relay-id hup >"$work_dir/hup.out" 2>&1 &
hup_pid=$!
track_background "$hup_pid" "relay for SIGHUP"
for _ in $(seq 100); do
  [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_relays WHERE relay_id LIKE 'hup:%'")" == 1 ]] && break
  sleep 0.1
done
kill -HUP "$hup_pid"
hup_rc=0
wait "$hup_pid" || hup_rc=$?
if ((hup_rc == 0)) && [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_relays WHERE relay_id LIKE 'hup:%'")" == 0 ]]; then
  pass
else
  fail "after SIGHUP the relay should exit 0 and remove its row; exit $hup_rc: $(cat "$work_dir/hup.out")"
fi
mkfifo "$work_dir/pipe"
(exec 3<"$work_dir/pipe"; sleep 0.5) &  # a reader that goes away
"$outbox_binary" relay --db "$db" --schema "$schema" --sink discard --stats-every 1s >"$work_dir/pipe" 2>"$work_dir/pipe.err" &
pipe_pid=$!
track_background "$pipe_pid" "relay writing to a closed pipe"
sleep 3
if kill -0 "$pipe_pid" 2>/dev/null && [[ "$(grep -c "stdout is closed" "$work_dir/pipe.err")" == 1 ]]; then
  pass
elif kill -0 "$pipe_pid" 2>/dev/null; then
  fail "the relay should say once that its stdout closed: $(cat "$work_dir/pipe.err")"
else
  pipe_rc=0
  wait "$pipe_pid" || pipe_rc=$?
  fail "the relay died writing to a closed stdout (exit $pipe_rc)"
fi

# --- files a flag names: bounded, regular files only (issue 23 item 7) ---------------------------------
# Each is refused at once with what it is; before, /dev/zero grew the process by gigabytes and a
# FIFO with no writer waited forever. (10 s: a reader without the bound would eat the machine.)
mkfifo "$work_dir/fifo"
mkdir "$work_dir/a-directory"
ln -s /dev/zero "$work_dir/zero-link"
head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' 'x' >"$work_dir/huge"
chmod 600 "$work_dir/huge"
expect_file_refusal() {
  local file="$1" expected="$2"
  run_collect "$work_dir/out" 10 "$outbox_binary" status --db "$db" --schema "$schema" --db-password-file "$file"
  check_refusal "--db-password-file $file" "$expected"
  run_collect "$work_dir/out" 10 "$outbox_binary" admin --db "$db" --schema "$schema" --listen 127.0.0.1:0 --admin-token-file "$file"
  check_refusal "--admin-token-file $file" "$expected"
  run_collect "$work_dir/out" 10 "$outbox_binary" relay --db "$db" --schema "$schema" --kafka-brokers "$brokers" --kafka-properties-file "$file"
  check_refusal "--kafka-properties-file $file" "$expected"
  run_collect "$work_dir/out" 10 "$outbox_binary" --config "$file" status --db "$db" --schema "$schema"
  check_refusal "--config $file" "$expected"
}
# check_refusal DESCRIPTION EXPECTED: the last run_collect exited 2 within its limit, saying EXPECTED.
check_refusal() {
  local output
  output="$(cat "$work_dir/out")"
  if ((rc == 2)) && [[ "$output" == *"$2"* ]]; then pass; else fail "$1: exit $rc (124: still running), expected 2 and \"$2\": ${output:0:300}"; fi
}
expect_file_refusal /dev/zero "is a character device"
expect_file_refusal "$work_dir/zero-link" "is a character device"
expect_file_refusal "$work_dir/fifo" "is a FIFO"
expect_file_refusal "$work_dir/a-directory" "is a directory"
expect_file_refusal "$work_dir/huge" "is larger than 1MiB"

# --- the config file (item 9 and the NUL of the Low list) ----------------------------------------------
python3 -c "print('.'.join(['x']*50000)+' = 1')" >"$work_dir/deep.toml"
run_collect "$work_dir/out" 30 "$outbox_binary" --config "$work_dir/deep.toml" status
check_refusal "a dotted key 50,000 levels deep" "more than 64 levels deep"
config_refusal() {  # config_refusal DESCRIPTION EXPECTED TOML: `relay` with that config is refused
  printf '%s\n' "$3" >"$work_dir/bad.toml"
  chmod 600 "$work_dir/bad.toml"
  run_collect "$work_dir/out" 30 "$outbox_binary" --config "$work_dir/bad.toml" relay --db "$db" --sink discard
  check_refusal "$1" "$2"
}
config_refusal 'durable-marks = "yes"' "[relay] durable-marks: takes true or false, not a string" $'[relay]\ndurable-marks = "yes"'
config_refusal 'db = 5' "db: takes a string in quotes" 'db = 5'
config_refusal 'batch-size = "<a password>"' "[relay] batch-size: takes a whole number" $'[relay]\nbatch-size = "'"$db_secret"'"'
config_refusal 'a NUL in a string' "holds a NUL character" $'[relay]\nrelay-id = "a\\u0000b"'
# A secret in a config file others may read: warned like a password file.
printf 'db = "host=127.0.0.1 port=1 user=app password=%s connect_timeout=2"\n' "$db_secret" >"$work_dir/open.toml"
chmod 644 "$work_dir/open.toml"
run_collect "$work_dir/out" 30 "$outbox_binary" --config "$work_dir/open.toml" status
if ((rc == 2)) && grep -q "holds a secret .* can be read by other users" "$work_dir/out"; then pass; else fail "a world-readable config with a password should be warned about: exit $rc: $(cat "$work_dir/out")"; fi

# --- connection strings libpq or the server refuse: at once, without the password (item 13) ----------
run_collect "$work_dir/out" 30 "$outbox_binary" status --db "host=127.0.0.1 port=$port passwor=$db_secret dbname=outbox"
check_refusal "a misspelt keyword (passwor=)" 'invalid connection option "passwor"'
run_collect "$work_dir/out" 30 "$outbox_binary" relay --db "postgresql://app:${db_secret}@[::1:$port/outbox" --sink discard
check_refusal "an unclosed IPv6 bracket" 'IPv6 host address'
run_collect "$work_dir/out" 30 "$outbox_binary" relay --db "$db options='-c statement_timeout=bad'" --schema "$schema" --sink discard
check_refusal "options=-c statement_timeout=bad" 'invalid value for parameter'

# --- argument errors exit 2, the documented code (item 15) ---------------------------------------------
run_collect "$work_dir/out" 30 "$outbox_binary" audit --since 1h
check_refusal "audit --since 1h without --topic" "--topic is required"
run_collect "$work_dir/out" 30 "$outbox_binary" nosuchcmd
check_refusal "outbox nosuchcmd" 'no command "nosuchcmd"'

# --- flags that contradict each other, and units (Low) -------------------------------------------------
expect_refusal "--backoff-base-ms 100000 --backoff-max-ms 10" "backoff_base (--backoff-base-ms) is 1m40s" \
  "$outbox_binary" relay --db "$db" --schema "$schema" --sink discard --backoff-base-ms 100000 --backoff-max-ms 10
expect_refusal "cleanup --retention 30m" "a retention of 30m is below the minimum of 1h" \
  "$outbox_binary" cleanup --db "$db" --schema "$schema" --retention 30m

# --- replay windows and the audit text (Low) -------------------------------------------------------------
replayable="$(sql -c "INSERT INTO $schema.outbox_events (event_id, aggregate_type, aggregate_id,
  aggregate_sequence, event_type, payload, occurred_at, published_at)
  VALUES (gen_random_uuid(), 'order', 'r1', 1, 'X', '{}', now() - interval '1 minute', now())
  RETURNING event_id")"
expect_refusal "replay with a reversed window" "the window is empty" \
  "$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --until 2h --reason r --actor ci
expect_refusal "replay with an empty window" "the window is empty" \
  "$outbox_binary" replay --db "$db" --schema "$schema" --since 2026-01-01T00:00:00Z --until 2026-01-01T00:00:00Z --reason r --actor ci
expect_refusal "replay of a future window" "is in the future" \
  "$outbox_binary" replay --db "$db" --schema "$schema" --since 2999-01-01T00:00:00Z --reason r --actor ci
expect_refusal "replay with a newline in the reason" "the reason holds the control character U+000A at byte 3" \
  "$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --reason $'one\nforged line' --actor ci
if [[ "$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE event_id = '$replayable' AND published_at IS NOT NULL")" == 1 ]]; then
  pass
else
  fail "a refused replay changed the event"
fi

# --- signals: a service stops in order and exits 0; a one-job command says it was interrupted ----------
: >"$work_dir/admin.err"
"$outbox_binary" admin --db "$db" --schema "$schema" --listen 127.0.0.1:0 >/dev/null 2>"$work_dir/admin.err" &
admin_pid=$!
track_background "$admin_pid" "admin for SIGTERM"
if listening_port "$work_dir/admin.err" "$admin_pid" >/dev/null; then
  kill -TERM "$admin_pid"
  admin_rc=0
  wait "$admin_pid" || admin_rc=$?
  if ((admin_rc == 0)); then pass; else fail "admin after SIGTERM: exit $admin_rc, expected 0: $(cat "$work_dir/admin.err")"; fi
else
  fail "admin did not start: $(cat "$work_dir/admin.err")"
fi
: >"$work_dir/mock2.out"
"$(dev_binary)" kafka-mock >"$work_dir/mock2.out" 2>/dev/null &
mock2_pid=$!
track_background "$mock2_pid" "kafka-mock for SIGHUP"
if wait_for_first_line "$mock2_pid" "$work_dir/mock2.out" 30 >/dev/null; then
  kill -HUP "$mock2_pid"
  mock2_rc=0
  wait "$mock2_pid" || mock2_rc=$?
  if ((mock2_rc == 0)); then pass; else fail "kafka-mock after SIGHUP: exit $mock2_rc, expected 0"; fi
else
  fail "the second kafka-mock did not start"
fi
# replay --wait with no relay running waits; SIGINT interrupts it: exit 130 and a line saying so.
: >"$work_dir/replay.err"
"$outbox_binary" replay --db "$db" --schema "$schema" --since 1h --reason "hostile input test" --actor ci \
  --wait 10m >"$work_dir/replay.out" 2>"$work_dir/replay.err" &
replay_pid=$!
track_background "$replay_pid" "replay --wait"
for _ in $(seq 100); do
  grep -q "pending again" "$work_dir/replay.out" 2>/dev/null && break
  sleep 0.1
done
kill -INT "$replay_pid"
replay_rc=0
wait "$replay_pid" || replay_rc=$?
if ((replay_rc == 130)) && grep -q "outbox replay: interrupted by SIGINT before it finished" "$work_dir/replay.err"; then
  pass
else
  fail "replay --wait after SIGINT: exit $replay_rc, expected 130 and a message: $(cat "$work_dir/replay.out" "$work_dir/replay.err")"
fi
sql -c "UPDATE $schema.outbox_events SET published_at = now() WHERE published_at IS NULL AND quarantined_at IS NULL" >/dev/null

# --- a closed stdout ends a foreground command (item 12) -----------------------------------------------
watch_rc=0
timeout --kill-after=5 20 bash -c 'set -o pipefail; "$1" status --db "$2" --schema "$3" --watch 200ms | head -c 50 >/dev/null' \
  _ "$outbox_binary" "$db" "$schema" 2>"$work_dir/watch.err" || watch_rc=$?
if ((watch_rc == 0)) && grep -q "stdout is closed; stopping" "$work_dir/watch.err"; then
  pass
else
  fail "status --watch 200ms | head -c 50: exit $watch_rc (124: never ended): $(cat "$work_dir/watch.err")"
fi

# --- nothing above printed a planted secret ----------------------------------------------------------
cat "$work_dir"/*.out "$work_dir"/*.err >>"$all_output" 2>/dev/null || true
if grep -q -e "$db_secret" -e "$kafka_secret" "$all_output"; then
  fail "a planted secret was printed:"
  grep -n -e "$db_secret" -e "$kafka_secret" "$all_output" | head -5 >&2
else
  pass
fi

summary_and_exit
