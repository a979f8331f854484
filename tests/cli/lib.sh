# shellcheck shell=bash
# Scaffolding shared by the command-line tests in this folder: a work folder and background
# processes cleaned up on exit, pass/fail counters, the closing summary, waiting for a
# background process's first line of output, starting `outbox-dev postgres` and `outbox-dev
# kafka-mock` (and Debian's nats-server, rabbitmq-server and redis-server), finding the port a
# process listens on, and the helpers every script uses (show_log, sql against "$db",
# expect_failure). Python helpers shared by the scripts sit beside this file (murmur2.py):
# `PYTHONPATH="$cli_dir" python3 - <<'PY'` imports them.
#
# Usage, from a script running under `set -euo pipefail`:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   cli_test_init NAME WORK_DIR_STEM
# NAME prefixes the summary ("NAME: N passed, M failed") and cleanup messages; the work folder
# is "$work_dir", a new ${TMPDIR:-/tmp}/WORK_DIR_STEM.XXXXXX removed on exit. start_postgres and
# start_kafka_mock run the outbox-dev program beside "$outbox_binary" (dev_binary) and wait up to
# "$startup_timeout_s" seconds (30 unless the script sets it).

passed=0
failed=0
# This folder, absolute: the Python helpers beside lib.sh (murmur2.py) are imported from it.
# shellcheck disable=SC2034  # cli_dir is for the scripts
cli_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
background_pids=()
background_names=()
background_groups=()  # 1: the pid leads a process group of its own, signalled as a whole

# The developer's program (the throwaway servers, the demo, bench): OUTBOX_DEV_BINARY, else the
# outbox-dev beside "$outbox_binary".
dev_binary() {
  # shellcheck disable=SC2154  # outbox_binary is the script's
  printf '%s\n' "${OUTBOX_DEV_BINARY:-$(dirname "$outbox_binary")/outbox-dev}"
}

# Sets the test's name, creates "$work_dir" and installs the traps that run cleanup().
cli_test_init() {
  readonly test_name="${1:?cli_test_init: missing test name}"
  local stem="${2:?cli_test_init: missing work folder stem}"
  work_dir="$(mktemp -d "${TMPDIR:-/tmp}/$stem.XXXXXX")"
  readonly work_dir
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# Has cleanup() stop process PID on exit; DESCRIPTION (default "process PID") names it in the
# message printed if it has to be killed.
track_background() {
  local pid="$1"
  background_pids+=("$pid")
  background_names+=("${2:-process $pid}")
  background_groups+=(0)
}

# As track_background, for a process started as the leader of a process group of its own (setsid):
# cleanup() signals the whole group, and waits until nothing in it is left. For a server started
# through a script that runs it as a child (rabbitmq-server: a shell over an Erlang VM), where
# stopping the script alone could leave the server running.
track_background_group() {
  local pid="$1"
  background_pids+=("$pid")
  background_names+=("${2:-process group $pid}")
  background_groups+=(1)
}

# Stops what the test started: SIGTERM first, so `outbox-dev postgres` can stop its server and
# remove its folder; SIGKILL only for a process that ignores that for 20 s. Then removes the
# work folder.
# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  local i pid target waited
  for ((i = 0; i < ${#background_pids[@]}; i++)); do
    target="${background_pids[i]}"
    if ((background_groups[i])); then target="-$target"; fi
    kill -TERM -- "$target" 2>/dev/null || true
  done
  for ((i = 0; i < ${#background_pids[@]}; i++)); do
    pid="${background_pids[i]}"
    target="$pid"
    if ((background_groups[i])); then target="-$pid"; fi
    waited=0
    while kill -0 -- "$target" 2>/dev/null && ((waited < 200)); do
      sleep 0.1
      waited=$((waited + 1))
    done
    if kill -0 -- "$target" 2>/dev/null; then
      echo "$test_name: ${background_names[i]} ignored SIGTERM for 20 s; killing it" >&2
      kill -KILL -- "$target" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n "${work_dir:-}" ]]; then rm -rf "$work_dir"; fi
}

pass() { passed=$((passed + 1)); }

fail() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}

summary_and_exit() {
  echo "$test_name: $passed passed, $failed failed"
  if ((failed > 0)); then exit 1; fi
  exit 0
}

# fatal [--log FILE] MESSAGE...: a failed prerequisite; later steps cannot run. With --log, also
# shows the last 40 lines of FILE, the failed step's log.
fatal() {
  local log=""
  if [[ "${1:-}" == "--log" ]]; then
    log="$2"
    shift 2
  fi
  fail "$*"
  if [[ -n "$log" && -f "$log" ]]; then
    echo "--- last 40 lines of $log ---" >&2
    tail -n 40 "$log" | sed 's/^/    /' >&2
  fi
  summary_and_exit
}

# Waits until `file` holds one complete line and prints it; fails when `pid` exits first or the
# timeout passes. Create `file` before starting the process, so the poll never races the
# process's own redirection.
wait_for_first_line() {
  local pid="$1" file="$2" timeout_s="$3" deadline
  deadline=$((SECONDS + timeout_s))
  while ((SECONDS < deadline)); do
    if [[ "$(wc -l <"$file")" -ge 1 ]]; then
      head -n 1 "$file"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
  return 1
}

# start_postgres [ARG...]: starts `outbox-dev postgres ARG...` in the background, tracked
# for cleanup, its stdout in "$work_dir/postgres.out" and its log in "$work_dir/postgres.err".
# Sets postgres_pid and db (the connection string, its first line of stdout). A prerequisite:
# fatal, with the log, when no connection string comes within "$startup_timeout_s" s. Not in a
# command substitution: the process must be started and tracked by the test's own shell.
# shellcheck disable=SC2120,SC2154  # ARG... is optional; outbox_binary is the script's
start_postgres() {
  local timeout_s="${startup_timeout_s:-30}"
  : >"$work_dir/postgres.out"  # created before the poll reads it, not by the redirection
  "$(dev_binary)" postgres "$@" >"$work_dir/postgres.out" 2>"$work_dir/postgres.err" &
  postgres_pid=$!
  track_background "$postgres_pid" "outbox-dev postgres"
  db="$(wait_for_first_line "$postgres_pid" "$work_dir/postgres.out" "$timeout_s")" ||
    fatal --log "$work_dir/postgres.err" "outbox-dev postgres printed no connection string within ${timeout_s} s"
}

# start_kafka_mock [ARG...]: starts `outbox-dev kafka-mock ARG...` in the background,
# tracked for cleanup, its stdout in "$work_dir/kafka.out" and its log in "$work_dir/kafka.err".
# Sets kafka_pid and brokers (the bootstrap servers, its first line of stdout). A prerequisite:
# fatal, with the log, when no bootstrap servers come within "$startup_timeout_s" s. Not in a
# command substitution (as start_postgres).
# shellcheck disable=SC2120,SC2034  # ARG... is optional; brokers is for the script
start_kafka_mock() {
  local timeout_s="${startup_timeout_s:-30}"
  : >"$work_dir/kafka.out"
  "$(dev_binary)" kafka-mock "$@" >"$work_dir/kafka.out" 2>"$work_dir/kafka.err" &
  kafka_pid=$!
  track_background "$kafka_pid" "outbox-dev kafka-mock"
  brokers="$(wait_for_first_line "$kafka_pid" "$work_dir/kafka.out" "$timeout_s")" ||
    fatal --log "$work_dir/kafka.err" "outbox-dev kafka-mock printed no bootstrap servers within ${timeout_s} s"
}

# free_port: a TCP port of 127.0.0.1 nobody listens on now (the kernel's choice).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready NAME PID LOG LINE TIMEOUT_S: waits until LOG holds LINE (the server's "ready"); fatal,
# with the log, when PID exits or TIMEOUT_S passes first.
wait_ready() {
  local name="$1" pid="$2" log="$3" line="$4" deadline=$((SECONDS + $5))
  until grep -q "$line" "$log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
      fatal --log "$log" "$name did not start within $5 s"
    fi
    sleep 0.1
  done
}

# start_nats: starts Debian's nats-server with JetStream on a free port of 127.0.0.1 in the
# background, tracked for cleanup, its store and log in "$work_dir/nats". Sets nats_pid and
# nats_url. A prerequisite: fatal, with the log, when it does not listen within
# "$startup_timeout_s" s.
# shellcheck disable=SC2034  # nats_url is for the script
start_nats() {
  local timeout_s="${startup_timeout_s:-30}" server
  server="$(command -v nats-server || echo /usr/sbin/nats-server)"
  [[ -x "$server" ]] || fatal "nats-server not found: install Debian's nats-server (scripts/install-deps.sh)"
  mkdir -p "$work_dir/nats"
  nats_port="$(free_port)"
  "$server" -a 127.0.0.1 -p "$nats_port" -js -sd "$work_dir/nats/store" >"$work_dir/nats/log" 2>&1 &
  nats_pid=$!
  track_background "$nats_pid" "nats-server"
  nats_url="nats://127.0.0.1:$nats_port"
  wait_ready nats-server "$nats_pid" "$work_dir/nats/log" "Server is ready" "$timeout_s"
}

# start_rabbitmq: starts Debian's rabbitmq-server as a node of its own (outbox-PORT@localhost) on
# a free port of 127.0.0.1 in the background, in a process group of its own tracked for cleanup
# (the script runs the Erlang VM as its child), every file it writes (database, logs, settings) in
# "$work_dir/rabbitmq" and its output in "$work_dir/rabbitmq/log.txt". No plugins; the guest user
# may connect from 127.0.0.1 (loopback_users = none). Sets rabbitmq_pid and rabbitmq_url
# (amqp://guest:guest@127.0.0.1:PORT/). A prerequisite: fatal, with the log, when the node has not
# started within "$rabbitmq_startup_timeout_s" s (90 unless the script sets it: an Erlang node
# takes seconds, more on a busy machine).
# shellcheck disable=SC2034  # rabbitmq_url is for the script
start_rabbitmq() {
  local timeout_s="${rabbitmq_startup_timeout_s:-90}" script dir port dist_port
  script="${OUTBOX_RABBITMQ_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}"
  [[ -x "$script" ]] ||
    fatal "$script not found: install Debian's rabbitmq-server (scripts/install-deps.sh)"
  command -v setsid >/dev/null 2>&1 || fatal "setsid not found (util-linux)"
  dir="$work_dir/rabbitmq"
  mkdir -p "$dir"
  printf '[].\n' >"$dir/enabled_plugins"
  printf 'loopback_users = none\n' >"$dir/rabbitmq.conf"
  : >"$dir/rabbitmq-env.conf"
  : >"$dir/log.txt"
  port="$(free_port)"
  dist_port="$(free_port)"
  # Through env(1), the script's only source of settings besides the files named here: otherwise
  # it reads /etc/rabbitmq and /var/lib/rabbitmq. setsid: the script leads a new process group (a
  # background job of this non-interactive shell leads none, so setsid does not fork and $! is
  # the script), which cleanup() stops as a whole, Erlang VM included.
  setsid /usr/bin/env HOME="$dir" RABBITMQ_NODENAME="outbox-$port@localhost" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist_port" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_LOGS=- \
    RABBITMQ_PID_FILE="$dir/pid" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
    RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" "$script" >"$dir/log.txt" 2>&1 </dev/null &
  rabbitmq_pid=$!
  track_background_group "$rabbitmq_pid" "rabbitmq-server"
  rabbitmq_url="amqp://guest:guest@127.0.0.1:$port/"
  wait_ready rabbitmq-server "$rabbitmq_pid" "$dir/log.txt" "Server startup complete" "$timeout_s"
}

# start_redis: starts Debian's redis-server on a free port of 127.0.0.1 in the background, tracked
# for cleanup, durable as the Redis sink requires (appendonly yes, appendfsync always; no RDB
# snapshots), its append-only file in "$work_dir/redis" and its log in "$work_dir/redis/log.txt".
# No configuration file: nothing of /etc/redis is read. Sets redis_pid and redis_url
# (redis://127.0.0.1:PORT/0). A prerequisite: fatal, with the log, when it is not ready within
# "$startup_timeout_s" s.
# shellcheck disable=SC2034  # redis_url is for the script
start_redis() {
  local timeout_s="${startup_timeout_s:-30}" server dir port
  server="${OUTBOX_REDIS_SERVER:-/usr/bin/redis-server}"
  [[ -x "$server" ]] || fatal "$server not found: install Debian's redis-server (scripts/install-deps.sh)"
  dir="$work_dir/redis"
  mkdir -p "$dir"
  : >"$dir/log.txt"
  port="$(free_port)"
  "$server" --bind 127.0.0.1 --port "$port" --protected-mode no --daemonize no \
    --appendonly yes --appendfsync always --save '' --dir "$dir" --logfile '' \
    >"$dir/log.txt" 2>&1 </dev/null &
  redis_pid=$!
  track_background "$redis_pid" "redis-server"
  redis_url="redis://127.0.0.1:$port/0"
  wait_ready redis-server "$redis_pid" "$dir/log.txt" "Ready to accept connections" "$timeout_s"
}

# listening_port LOG [PID [TIMEOUT_S]]: waits until LOG holds the line a process writes once it
# listens ("serving /metrics ... on 127.0.0.1:PORT" from a relay, "serving on port PORT" from
# `outbox admin`) and prints PORT. Returns 1 when TIMEOUT_S (default "$startup_timeout_s", else
# 30) passes first, or when PID, if given, exits without having written it. Call it in a command
# substitution: port="$(listening_port LOG PID)" || fatal ...
listening_port() {
  local log="$1" pid="${2:-}" timeout_s="${3:-${startup_timeout_s:-30}}" port="" deadline exited
  deadline=$((SECONDS + timeout_s))
  while :; do
    # Checked before the log is read: a process that wrote the line and then exited still counts.
    exited=0
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then exited=1; fi
    port="$(sed -n -E -e 's/.*serving \/metrics.* on 127\.0\.0\.1:([0-9]+).*/\1/; t found' \
      -e 's/.*serving on port ([0-9]+).*/\1/; t found' -e 'd' -e ':found' -e 'p; q' \
      "$log" 2>/dev/null || true)"
    if [[ -n "$port" ]]; then
      echo "$port"
      return 0
    fi
    if ((exited || SECONDS >= deadline)); then return 1; fi
    sleep 0.1
  done
}

# Prints the log of a background process, indented, after a failure.
show_log() {
  local name="$1" file="$2"
  echo "--- $name ($file) ---" >&2
  sed 's/^/    /' "$file" >&2 || true
}

# psql against "$db", quiet, unaligned, stopping at the first error.
sql() { psql "$db" -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }

# relay_until_published NAME FLAG...: `outbox relay --db "$db" --schema "$schema" FLAG...` in the
# background, its output in "$work_dir/NAME.out" and ".err", until no row of the schema's outbox
# is unpublished (or "${publish_timeout_s:-60}" s), then SIGTERM: it must have published
# everything (one check) and exit 0 within 20 s (another).
# shellcheck disable=SC2154  # schema: the calling script's
relay_until_published() {
  local name="$1" pid rc=0 deadline left
  shift
  "$outbox_binary" relay --db "$db" --schema "$schema" "$@" \
    >"$work_dir/$name.out" 2>"$work_dir/$name.err" &
  pid=$!
  track_background "$pid" "relay $name"
  unpublished() { sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL"; }
  deadline=$((SECONDS + ${publish_timeout_s:-60}))
  while ((SECONDS < deadline)) && [[ "$(unpublished)" != 0 ]] && kill -0 "$pid" 2>/dev/null; do
    sleep 0.2
  done
  left="$(unpublished)"
  if [[ "$left" == 0 ]]; then
    pass
  else
    show_log "$name stderr" "$work_dir/$name.err"
    fail "$name should publish every event; $left are not published"
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  wait "$pid" || rc=$?
  if ((rc == 0)); then pass; else fail "$name should exit 0 after SIGTERM, got $rc"; fi
}

# Runs a command expected to fail; checks the exit status is non-zero and stderr+stdout contain
# `expected`.
expect_failure() {
  local description="$1" expected="$2"
  shift 2
  local output rc=0
  output="$("$@" 2>&1)" || rc=$?
  if ((rc == 0)); then
    fail "$description: expected a non-zero exit status, got 0; output: $output"
  elif [[ "$output" != *"$expected"* ]]; then
    fail "$description: exit status $rc but output lacks \"$expected\"; output: $output"
  else
    pass
  fi
}
