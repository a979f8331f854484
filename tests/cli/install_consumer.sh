#!/usr/bin/env bash
# What a user does: install outbox, build a service against it with find_package(outbox), run it.
# Installs the build tree into a temporary prefix, configures and builds examples/hello_outbox
# against only that prefix, then runs it twice on a private PostgreSQL (`outbox-dev postgres`): the
# first run must enqueue sequence 1, the second sequence 2 for the same aggregate. Then the same
# service on libpqxx (examples/pqxx_order_service, outbox::pqxx) must enqueue sequence 3, and a
# consumer built the same way (examples/projection_consumer, outbox::kafka) applies the three events
# a relay publishes, once each.
#
# Usage: install_consumer.sh SOURCE_DIR BUILD_DIR
set -euo pipefail

readonly source_dir="${1:?usage: install_consumer.sh SOURCE_DIR BUILD_DIR}"
readonly build_dir="${2:?usage: install_consumer.sh SOURCE_DIR BUILD_DIR}"
readonly outbox_binary="$build_dir/outbox"  # for start_postgres
readonly startup_timeout_s=30

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init install_consumer outbox-install-test
readonly prefix="$work_dir/prefix"
readonly example_build="$work_dir/hello_outbox-build"

# Runs the example once and checks it printed an event id and "sequence <expected>".
check_order_run() {
  local description="$1" expected_sequence="$2"
  shift 2
  local output rc=0
  output="$("$@" 2>&1)" || rc=$?
  local uuid='[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
  if ((rc != 0)); then
    fail "$description: hello_outbox exited $rc; output: $output"
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
  fatal --log "$work_dir/install.log" "cmake --install $build_dir --prefix $prefix failed"
fi
if [[ -f "$prefix/lib/cmake/outbox/outboxConfig.cmake" || -f "$prefix/lib64/cmake/outbox/outboxConfig.cmake" ]]; then
  pass
else
  fatal --log "$work_dir/install.log" "no lib/cmake/outbox/outboxConfig.cmake under $prefix after install"
fi

# No package registry: find_package must succeed from the prefix alone, not from a build tree.
if ! cmake -S "$source_dir/examples/hello_outbox" -B "$example_build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  >"$work_dir/configure.log" 2>&1; then
  fatal --log "$work_dir/configure.log" "configuring examples/hello_outbox with find_package(outbox) failed"
fi
outbox_dir="$(sed -n 's/^outbox_DIR:PATH=//p' "$example_build/CMakeCache.txt")"
if [[ "$outbox_dir" == "$prefix/"* ]]; then
  pass
else
  fail "find_package(outbox) should use the temporary prefix $prefix; it used \"$outbox_dir\""
fi
if ! cmake --build "$example_build" >"$work_dir/build.log" 2>&1; then
  fatal --log "$work_dir/build.log" "building examples/hello_outbox against the installed outbox failed"
fi
pass

# An application that links only outbox::outbox gets no broker client and no mock broker: Kafka
# is outbox::kafka, the embedded servers outbox::testing (both in the package, checked below).
if ldd "$example_build/hello_outbox" | grep 'librdkafka' >/dev/null; then
  fail "hello_outbox links only outbox::outbox but loads librdkafka: $(ldd "$example_build/hello_outbox" | grep rdkafka)"
else
  pass
fi
for target in outbox::kafka outbox::testing; do
  if grep -rqs "add_library($target " "$prefix"/lib*/cmake/outbox/; then
    pass
  else
    fail "the installed package does not define $target"
  fi
done

# --- 2. run it twice on a private PostgreSQL ---------------------------------------------------
start_postgres
pass

check_order_run "first run (connection string as argv[1])" 1 \
  "$example_build/hello_outbox" "$db"
check_order_run "second run (connection string from OUTBOX_DATABASE_URL)" 2 \
  env OUTBOX_DATABASE_URL="$db" "$example_build/hello_outbox"

# --- 3. the same service on libpqxx (outbox::pqxx), continuing the customer's sequence ----------
if ldd "$example_build/hello_outbox" | grep 'libpqxx' >/dev/null; then
  fail "hello_outbox links only outbox::outbox but loads libpqxx"
else
  pass
fi
readonly pqxx_build="$work_dir/pqxx_order_service-build"
if ! cmake -S "$source_dir/examples/pqxx_order_service" -B "$pqxx_build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  >"$work_dir/pqxx-configure.log" 2>&1 ||
  ! cmake --build "$pqxx_build" >"$work_dir/pqxx-build.log" 2>&1; then
  cat "$work_dir/pqxx-build.log" >>"$work_dir/pqxx-configure.log" 2>/dev/null || true
  fatal --log "$work_dir/pqxx-configure.log" "building examples/pqxx_order_service against the installed outbox failed"
fi
pass
check_order_run "the libpqxx service, after the libpq one's two events" 3 \
  "$pqxx_build/pqxx_order_service" "$db"

# --- 4. a consumer built against the package applies what a relay published, once each ---------
readonly consumer_build="$work_dir/projection_consumer-build"
if ! cmake -S "$source_dir/examples/projection_consumer" -B "$consumer_build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  >"$work_dir/consumer-configure.log" 2>&1 ||
  ! cmake --build "$consumer_build" >>"$work_dir/consumer-configure.log" 2>&1; then
  fatal --log "$work_dir/consumer-configure.log" "building examples/projection_consumer against the installed outbox failed"
fi
pass
start_kafka_mock
"$build_dir/outbox" relay --db "$db" --kafka-brokers "$brokers" >/dev/null 2>"$work_dir/relay.err" &
relay_pid=$!
track_background "$relay_pid" "relay"
orders() {
  psql "$db" -X -q -A -t -c "SELECT orders FROM outbox.customer_orders WHERE customer_id = 'customer-42'" 2>&1
}
out="$(timeout 60 "$consumer_build/projection_consumer" "$db" "$brokers" 3 2>&1)" || true
if [[ "$out" == "applied 3 event(s), 0 duplicate(s) skipped" && "$(orders)" == 3 ]]; then
  pass
else
  show_log "relay stderr" "$work_dir/relay.err"
  fail "projection_consumer should apply the 3 OrderPlaced events: said \"$out\", orders $(orders)"
fi
# The same events published again (outbox replay): delivered twice, applied once.
"$build_dir/outbox" replay --db "$db" --since 1h --reason "install test" --actor test --wait 60s \
  >"$work_dir/replay.out" 2>&1 || fatal --log "$work_dir/replay.out" "outbox replay failed"
out="$(timeout 60 "$consumer_build/projection_consumer" "$db" "$brokers" 3 2>&1)" || true
if [[ "$out" == "applied 0 event(s), 3 duplicate(s) skipped" && "$(orders)" == 3 ]]; then
  pass
else
  fail "the replayed events should be skipped as duplicates: said \"$out\", orders $(orders)"
fi
kill -TERM "$relay_pid"
wait "$relay_pid" || true

summary_and_exit
