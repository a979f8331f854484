#!/usr/bin/env bash
# `outbox-dev bench` at a toy size: every scenario runs, the backlogs drain (bench fails otherwise),
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
output="$("$(dev_binary)" bench --events 4000 --aggregates 100 --seconds 1 --clients 2 \
  --rates 100 --out "$work_dir/out" 2>&1)" || rc=$?
if ((rc == 0)); then pass; else fatal "outbox-dev bench exited $rc: $output"; fi

results="$work_dir/out/results.json"
check() {
  local description="$1" expression="$2"
  if python3 -c "import json,sys; r=json.load(open('$results')); sys.exit(0 if ($expression) else 1)"; then
    pass
  else
    fail "$description; results: $(cat "$results")"
  fi
}
# Each relay scenario runs once per source (--sources, default polling,cdc); the producer once.
check "one result per scenario and source (producer; ceiling, drain (then table-less, cdc only), live 100/s, live max and answer for polling and cdc; ack), then the machine" \
  "[(x['scenario'], x.get('source')) for x in r] == [('producer', None), ('ceiling', 'polling'), ('ceiling', 'cdc'), ('drain', 'polling'), ('drain', 'cdc'), ('table-less', 'cdc'), ('live', 'polling'), ('live', 'polling'), ('live', 'cdc'), ('live', 'cdc'), ('answer', 'polling'), ('answer', 'cdc'), ('ack', None), ('machine', None)]"
check "the machine is described" "r[-1]['cpus'] >= 1 and r[-1]['postgresql'].startswith('15') and r[-1]['fsync'] == 'on'"
check "both producer rates are positive" \
  "r[0]['without_event_tx_per_s'] > 0 and r[0]['with_event_tx_per_s'] > 0"
check "ceiling and drain moved all 4000 events and measured the relay, for both sources" \
  "all(x['events'] == 4000 and x['events_per_s'] > 0 and x['relay_peak_rss_mib'] > 1 for x in r if x['scenario'] in ('ceiling', 'drain'))"
check "drain is compared with the ceiling, and the CDC catch-up with the polling drain" \
  "all(0 < x['of_ceiling'] for x in r if x['scenario'] == 'drain') and [x for x in r if x['scenario'] == 'drain'][1]['of_polling'] > 0"
check "table-less events (no rows) were all published from the slot, and compared with the polling drain" \
  "[(x['events'], x['materialized']) for x in r if x['scenario'] == 'table-less'] == [(4000, 0)] and all(x['events_per_s'] > 0 and x['of_polling'] > 0 and x['cpu_of_polling'] > 0 for x in r if x['scenario'] == 'table-less')"
check "ack timed every send of the bare librdkafka producer and of outbox's sink at 1,000/s" \
  "all(x[k]['acked'] >= 900 and 0 < x[k]['p50_ms'] <= x[k]['p99_ms'] for x in r if x['scenario'] == 'ack' for k in ('librdkafka', 'outbox_sink'))"
check "answer waited for every request's event to be published, which costs more than the commit" \
  "all(x['not_published_in_5s'] == 0 and x['polls_per_wait'] >= 1 and x['answer_after_publish_ms']['p50'] > x['commit_ms']['p50'] and x['requests_per_s_after_publish'] > 0 for x in r if x['scenario'] == 'answer')"
check "live runs published every event and report latency percentiles, for both sources" \
  "all(x['unpublished'] == 0 and 0 < x['latency_p50_ms'] <= x['latency_p99_ms'] <= x['latency_max_ms'] for x in r if x['scenario'] == 'live')"
check "live max is compared with the producers alone around it and with the producer scenario, for both sources" \
  "all(x['producers_alone_before_per_s'] > 0 and x['producers_alone_after_per_s'] > 0 and abs(x['of_producers_alone'] - x['committed_per_s'] / x['producers_alone_per_s']) < 1e-9 and x['of_producer_scenario'] > 0 for x in r if x.get('offered') == 'max')"
check "every live rate says what the relay, its PostgreSQL sessions (the walsender too) and the mock broker cost in cores" \
  "all(isinstance(x['relay_cores'], (int, float)) and isinstance(x['relay_postgres_session_cores'], (int, float)) and isinstance(x['relay_walsender_cores'], (int, float)) and isinstance(x['broker_cores'], (int, float)) for x in r if x['scenario'] == 'live')"
for plot in drain-throughput live-latency; do
  if head -c 4 "$work_dir/out/$plot.svg" | grep -q '<svg'; then
    pass
  else
    fail "$plot.svg is missing or not an SVG document"
  fi
done
if [[ "$output" == *"scenario"*"result"* ]]; then pass; else fail "no result table printed: $output"; fi

summary_and_exit
