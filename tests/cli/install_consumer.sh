#!/usr/bin/env bash
# What a user does: install outbox, build a service against it with find_package(outbox), run it.
# Installs the build tree into a temporary prefix, configures and builds examples/order_service
# against only that prefix, then runs it twice on a private PostgreSQL (`outbox postgres`): the
# first run must enqueue sequence 1, the second sequence 2 for the same aggregate.
#
# Usage: install_consumer.sh SOURCE_DIR BUILD_DIR
set -euo pipefail

readonly source_dir="${1:?usage: install_consumer.sh SOURCE_DIR BUILD_DIR}"
readonly build_dir="${2:?usage: install_consumer.sh SOURCE_DIR BUILD_DIR}"
readonly startup_timeout_s=30

work_dir="$(mktemp -d "${TMPDIR:-/tmp}/outbox-install-test.XXXXXX")"
readonly work_dir
readonly prefix="$work_dir/prefix"
readonly example_build="$work_dir/order_service-build"
postgres_pid=""
passed=0
failed=0

# SIGTERM first so `outbox postgres` stops its server and removes its folder; SIGKILL only when
# it ignores that for 20 s.
# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  if [[ -n "$postgres_pid" ]]; then
    kill -TERM "$postgres_pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$postgres_pid" 2>/dev/null && ((waited < 200)); do
      sleep 0.1
      waited=$((waited + 1))
    done
    if kill -0 "$postgres_pid" 2>/dev/null; then
      echo "install_consumer: outbox postgres ignored SIGTERM for 20 s; killing it" >&2
      kill -KILL "$postgres_pid" 2>/dev/null || true
    fi
    wait "$postgres_pid" 2>/dev/null || true
  fi
  rm -rf "$work_dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pass() { passed=$((passed + 1)); }

fail() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}

summary_and_exit() {
  echo "install_consumer: $passed passed, $failed failed"
  if ((failed > 0)); then exit 1; fi
  exit 0
}

# A failed step the later ones depend on; shows that step's log.
fatal() {
  local log="$1"
  shift
  fail "$*"
  if [[ -n "$log" && -f "$log" ]]; then
    echo "--- last 40 lines of $log ---" >&2
    tail -n 40 "$log" | sed 's/^/    /' >&2
  fi
  summary_and_exit
}

# Runs the example once and checks it printed an event id and "sequence <expected>".
check_order_run() {
  local description="$1" expected_sequence="$2"
  shift 2
  local output rc=0
  output="$("$@" 2>&1)" || rc=$?
  local uuid='[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
  if ((rc != 0)); then
    fail "$description: order_service exited $rc; output: $output"
  elif ! [[ "$output" =~ event\ $uuid ]]; then
    fail "$description: output has no \"event <uuid>\"; output: $output"
  elif ! [[ "$output" =~ sequence\ ([0-9]+) ]] || [[ "${BASH_REMATCH[1]}" != "$expected_sequence" ]]; then
    fail "$description: expected \"sequence $expected_sequence\"; output: $output"
  else
    pass
  fi
}

# --- 1. install, then build the example against the installed package only -------------------
if ! cmake --install "$build_dir" --prefix "$prefix" >"$work_dir/install.log" 2>&1; then
  fatal "$work_dir/install.log" "cmake --install $build_dir --prefix $prefix failed"
fi
if [[ -f "$prefix/lib/cmake/outbox/outboxConfig.cmake" || -f "$prefix/lib64/cmake/outbox/outboxConfig.cmake" ]]; then
  pass
else
  fatal "$work_dir/install.log" "no lib/cmake/outbox/outboxConfig.cmake under $prefix after install"
fi

# No package registry: find_package must succeed from the prefix alone, not from a build tree.
if ! cmake -S "$source_dir/examples/order_service" -B "$example_build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  >"$work_dir/configure.log" 2>&1; then
  fatal "$work_dir/configure.log" "configuring examples/order_service with find_package(outbox) failed"
fi
outbox_dir="$(sed -n 's/^outbox_DIR:PATH=//p' "$example_build/CMakeCache.txt")"
if [[ "$outbox_dir" == "$prefix/"* ]]; then
  pass
else
  fail "find_package(outbox) should use the temporary prefix $prefix; it used \"$outbox_dir\""
fi
if ! cmake --build "$example_build" >"$work_dir/build.log" 2>&1; then
  fatal "$work_dir/build.log" "building examples/order_service against the installed outbox failed"
fi
pass

# --- 2. run it twice on a private PostgreSQL ---------------------------------------------------
: >"$work_dir/postgres.out"  # created before the poll below reads it, not by the redirection
"$build_dir/outbox" postgres >"$work_dir/postgres.out" 2>"$work_dir/postgres.err" &
postgres_pid=$!
deadline=$((SECONDS + startup_timeout_s))
while [[ "$(wc -l <"$work_dir/postgres.out")" -lt 1 ]]; do
  if ! kill -0 "$postgres_pid" 2>/dev/null || ((SECONDS >= deadline)); then
    fatal "$work_dir/postgres.err" "outbox postgres printed no connection string within ${startup_timeout_s} s"
  fi
  sleep 0.1
done
db="$(head -n 1 "$work_dir/postgres.out")"
pass

check_order_run "first run (connection string as argv[1])" 1 \
  "$example_build/order_service" "$db"
check_order_run "second run (connection string from OUTBOX_DATABASE_URL)" 2 \
  env OUTBOX_DATABASE_URL="$db" "$example_build/order_service"

summary_and_exit
