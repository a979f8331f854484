#!/usr/bin/env bash
# `outbox bench` at a toy size: every scenario runs, the backlogs drain (bench fails otherwise),
# results.json holds one object per scenario with its figures, and both plots are SVG documents.
# A smoke test of the tool, not a speed test: the figures themselves are not judged here.
#
# Usage: bench_smoke.sh /path/to/outbox
set -euo pipefail

readonly outbox_binary="${1:?usage: bench_smoke.sh /path/to/outbox}"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init bench_smoke outbox-bench-smoke

rc=0
output="$("$outbox_binary" bench --events 4000 --aggregates 100 --seconds 1 --clients 2 \
  --rates 100 --out "$work_dir/out" 2>&1)" || rc=$?
if ((rc == 0)); then pass; else fatal "outbox bench exited $rc: $output"; fi

results="$work_dir/out/results.json"
check() {
  local description="$1" expression="$2"
  if python3 -c "import json,sys; r=json.load(open('$results')); sys.exit(0 if ($expression) else 1)"; then
    pass
  else
    fail "$description; results: $(cat "$results")"
  fi
}
check "one result per scenario (producer, ceiling, drain, live 100/s, live max), then the machine" \
  "[x['scenario'] for x in r] == ['producer', 'ceiling', 'drain', 'live', 'live', 'machine']"
check "the machine is described" "r[5]['cpus'] >= 1 and r[5]['postgresql'].startswith('15') and r[5]['fsync'] == 'on'"
check "both producer rates are positive" \
  "r[0]['without_event_tx_per_s'] > 0 and r[0]['with_event_tx_per_s'] > 0"
check "ceiling and drain moved all 4000 events and measured the relay" \
  "all(x['events'] == 4000 and x['events_per_s'] > 0 and x['relay_peak_rss_mib'] > 1 for x in r[1:3])"
check "drain is compared with the ceiling" "0 < r[2]['of_ceiling']"
check "live runs published every event and report latency percentiles" \
  "all(x['unpublished'] == 0 and 0 < x['latency_p50_ms'] <= x['latency_p99_ms'] <= x['latency_max_ms'] for x in r[3:5])"
check "live max is compared with the producers alone around it (relay paused) and with the producer scenario" \
  "r[4]['producers_alone_before_per_s'] > 0 and r[4]['producers_alone_after_per_s'] > 0 and abs(r[4]['of_producers_alone'] - r[4]['committed_per_s'] / r[4]['producers_alone_per_s']) < 1e-9 and r[4]['of_producer_scenario'] > 0"
check "every live rate says what the relay, its PostgreSQL session and the mock broker cost in cores" \
  "all(isinstance(x['relay_cores'], (int, float)) and isinstance(x['relay_postgres_session_cores'], (int, float)) and isinstance(x['mock_broker_cores'], (int, float)) for x in r[3:5])"
for plot in drain-throughput live-latency; do
  if head -c 4 "$work_dir/out/$plot.svg" | grep -q '<svg'; then
    pass
  else
    fail "$plot.svg is missing or not an SVG document"
  fi
done
if [[ "$output" == *"scenario"*"result"* ]]; then pass; else fail "no result table printed: $output"; fi

summary_and_exit
