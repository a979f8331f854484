#!/usr/bin/env bash
# `make test`: every test, in the time CI allows (~25 min on 2 cores), with the gtest tests under
# AddressSanitizer and UBSan.
#
# Two build trees, two test runs side by side:
#   build/                    plain (RelWithDebInfo): the outbox binary and the crash campaign;
#                             runs the tests labelled fault and cli (the crash campaign, the
#                             command-line scripts, the demo, the install test), which time real
#                             processes and want optimised code.
#   build-address-undefined/  ASan + UBSan (-O1 -g1): runs the gtest tests (labels unit and
#                             integration, not cli). A leak, a bad access or undefined behaviour
#                             fails the test that hit it. Also the fuzzers (label fuzz: built by
#                             clang in <tree>/fuzz with their own sanitizers), which evens out the
#                             two halves' time (2026-12-01, before the initdb cache and the
#                             shorter campaign: plain 1,148 s, ASan 1,238 s).
# Running the gtest tests once, sanitized, instead of twice is what keeps the sanitizers within
# the budget: the plain tree does not even build them. `make test-plain` runs every test on the
# plain build (CTEST_ARGS selects), `make test-sanitize` only the sanitized half.
#
# Environment: BUILD_DIR, SANITIZE_DIR, BUILD_TYPE, WERROR (ON/OFF), JOBS, as in the Makefile.
# Tests labelled slow are left out (`cd build && ctest -L slow`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir="${BUILD_DIR:-build}"
sanitize_dir="${SANITIZE_DIR:-build-address-undefined}"
build_type="${BUILD_TYPE:-RelWithDebInfo}"
werror="${WERROR:-ON}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

./scripts/install-deps.sh
# No include cycle between the folders of src/, no file over 500 lines, no function over 60.
./scripts/check-structure.sh
# The repository's .clang-format is the one in force (`make format` applies it).
find src include apps tests -type f \( -name '*.cpp' -o -name '*.hpp' \) -print0 |
  xargs -0 clang-format --dry-run -Werror
echo "test.sh: every source file is formatted as .clang-format says"

started=$SECONDS
# Line tables only (-g1, as the sanitized tree has): enough for a backtrace, and 25-30% less
# compile time (CMakeLists.txt, OUTBOX_LINE_TABLES_ONLY; `make build` turns it off again).
# CMAKE_SKIP_INSTALL_ALL_DEPENDENCY: the package test's cpack installs what is built, instead of
# first building every target this tree leaves out (the gtest binaries, the benchmarks): that
# took 341 s of a CI run, against 6 s with the tree built.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" -DOUTBOX_WERROR="$werror" \
  -DOUTBOX_SANITIZE= -DOUTBOX_LINE_TABLES_ONLY=ON -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON
# Every installed library too (the install and package tests install the tree): outbox_pqxx is
# no dependency of the programs.
cmake --build "$build_dir" -j"$jobs" --target outbox_cli outbox_dev outbox_campaign outbox_pqxx
cmake -S . -B "$sanitize_dir" -DCMAKE_BUILD_TYPE="$build_type" -DOUTBOX_WERROR="$werror" \
  -DOUTBOX_SANITIZE=address,undefined
cmake --build "$sanitize_dir" -j"$jobs" --target outbox_unit_tests outbox_integration_tests \
  outbox_rabbitmq_tests outbox_redis_tests
echo "test.sh: both trees built in $((SECONDS - started)) s"

# One test at a time in each tree, the two trees side by side: the load of `ctest -j2`. Each
# run's lines carry its tree's name; a run's exit status is kept through the pipe.
started=$SECONDS
# (A subshell per run: its status is the pipeline's, ctest's, under pipefail.)
# Each tree keeps one initdb'd cluster to copy (OUTBOX_EMBEDDED_PG_CACHE, see
# outbox/testing/embedded_postgres.hpp), made afresh by the run's first cluster: about a second
# less per test process that starts PostgreSQL.
(
  cd "$build_dir"
  rm -rf pg-cache || true  # left by another user: its entries are not ours, so not used
  export OUTBOX_EMBEDDED_PG_CACHE="$PWD/pg-cache"
  ctest --output-on-failure --timeout 900 -L 'fault|cli' -LE slow 2>&1 | sed -u 's/^/[plain] /'
) &
plain_pid=$!
(
  cd "$sanitize_dir"
  rm -rf pg-cache || true  # left by another user: its entries are not ours, so not used
  export OUTBOX_EMBEDDED_PG_CACHE="$PWD/pg-cache"
  ctest --output-on-failure --timeout 900 -L 'unit|integration|fuzz' -LE 'cli|slow' 2>&1 |
    sed -u 's/^/[asan] /'
) &
sanitized_pid=$!
plain_status=0
sanitized_status=0
wait "$plain_pid" || plain_status=$?
wait "$sanitized_pid" || sanitized_status=$?
echo "test.sh: tests ran for $((SECONDS - started)) s; plain build: exit $plain_status," \
  "ASan/UBSan build: exit $sanitized_status"
if ((plain_status != 0 || sanitized_status != 0)); then exit 1; fi
