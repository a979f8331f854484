#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: run_fuzz.sh BINARY SECONDS WORK_CORPUS SEEDS.
# New inputs go to WORK_CORPUS (kept between runs), crashes to WORK_CORPUS/../artifacts. Prints
# libFuzzer's final figures and one summary line; exits non-zero on any crash or leak.
set -euo pipefail
binary="$1" seconds="$2" corpus="$3" seeds="$4"
name="$(basename "$binary")"
artifacts="$(dirname "$corpus")/../artifacts"
mkdir -p "$corpus" "$artifacts"
log="$(dirname "$corpus")/../${name}.log"
status=0
"$binary" -max_total_time="$seconds" -print_final_stats=1 -timeout=60 -rss_limit_mb=2048 \
  -max_len=8192 -artifact_prefix="$artifacts/${name}-" "$corpus" "$seeds" >"$log" 2>&1 || status=$?
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
corpus_files="$(find "$corpus" -type f | wc -l)"
seed_files="$(find "$seeds" -type f | wc -l)"
if [[ $status -ne 0 ]]; then
  echo "fuzz $name: FAILED (exit $status); see $log and $artifacts"
  grep -E 'ERROR|property violated|SUMMARY|input \(escaped\)|Test unit written' "$log" | head -20
  exit 1
fi
echo "fuzz $name: ${seconds}s, corpus ${corpus_files} new + ${seed_files} seeds, no crash"
