#!/usr/bin/env bash
# shellcheck disable=SC2016  # $1 in --apply is the SQL statement's parameter, not the shell's
# `outbox consume`: a read model built in PostgreSQL from another service's events with no code
# but SQL. Events made by `outbox enqueue` and published by the relay to Kafka and to Redis are
# applied by `outbox consume --apply "SELECT app.apply_order_event($1)"`: every event once, each
# aggregate in sequence order; an event the function refuses is retried, parked, listed by
# `outbox inbox list`, and skipped by an operator while the consumer runs, after which its
# aggregate goes on; /metrics shows the counts; SIGTERM stops it in order. Bad --apply statements
# are refused at start with what to fix.
#
# Usage: consume.sh /path/to/outbox
# Needs: psql, curl and redis-server; PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: consume.sh /path/to/outbox}"
readonly schema=shop
readonly publish_timeout_s=60

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init consume outbox-consume-test

start_postgres
start_kafka_mock
start_redis
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"

# The read model and the function that applies one event: what a team writes instead of C++.
# app.applied records every application in order, for the checks below.
sql <<'SQL'
CREATE SCHEMA app;
CREATE TABLE app.orders (id text PRIMARY KEY, status text NOT NULL, events int NOT NULL);
CREATE TABLE app.applied (n bigserial, via text, aggregate_id text, sequence bigint, event_id uuid);
CREATE FUNCTION app.apply_order_event(e jsonb, via text DEFAULT 'kafka') RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF e->>'event_type' = 'OrderCorrupted' THEN
    RAISE EXCEPTION 'cannot apply % of order %', e->>'event_type', e->>'aggregate_id';
  END IF;
  INSERT INTO app.orders VALUES (e->>'aggregate_id', e->'payload'->>'status', 1)
  ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, events = app.orders.events + 1;
  INSERT INTO app.applied (via, aggregate_id, sequence, event_id)
  VALUES (via, e->>'aggregate_id', (e->>'aggregate_sequence')::bigint, (e->>'event_id')::uuid);
END $$;
SQL

enqueue() {
  "$outbox_binary" enqueue --db "$db" --schema "$schema" --aggregate-type order \
    --aggregate-id "$1" --event-type "$2" --payload "{\"status\": \"$3\"}" >/dev/null
}
make_events() {
  enqueue o-1 OrderPlaced placed
  enqueue o-2 OrderPlaced placed
  enqueue o-1 OrderPaid paid
  enqueue o-2 OrderCorrupted corrupt
  enqueue o-3 OrderPlaced placed
  enqueue o-1 OrderShipped shipped
  enqueue o-2 OrderCancelled cancelled
}
applied() { sql -c "SELECT count(*) FROM app.applied WHERE via = '$1'"; }
wait_applied() {
  local via="$1" want="$2" deadline=$((SECONDS + 60))
  while (($(applied "$via") < want)) && ((SECONDS < deadline)); do sleep 0.2; done
  [[ "$(applied "$via")" == "$want" ]]
}
# Every aggregate's sequences, in the order applied: "o-1:1,2,3 o-2:1 ..."
order_of() {
  sql -c "SELECT string_agg(aggregate_id || ':' || seqs, ' ' ORDER BY aggregate_id) FROM (
    SELECT aggregate_id, string_agg(sequence::text, ',' ORDER BY n) AS seqs
    FROM app.applied WHERE via = '$1' GROUP BY aggregate_id) a"
}
poison_id() {
  sql -c "SELECT event_id FROM $schema.outbox_events WHERE event_type = 'OrderCorrupted'"
}

# --- 1. refusals at start, before anything is read ----------------------------------------------
consume_flags=(--db "$db" --schema "$schema" --kafka-brokers "$brokers" --topic outbox.order)
expect_failure "--apply without \$1" "does not use \$1" \
  "$outbox_binary" consume "${consume_flags[@]}" --consumer c --apply "SELECT 1"
expect_failure "--apply with \$2" "names \$2" \
  "$outbox_binary" consume "${consume_flags[@]}" --consumer c --apply 'SELECT app.f($1, $2)'
expect_failure "a function that does not exist" "PostgreSQL refuses the statement" \
  "$outbox_binary" consume "${consume_flags[@]}" --consumer c --apply 'SELECT app.nope($1)'
expect_failure "redis without aggregate types" "--redis-aggregate-type" \
  "$outbox_binary" consume --db "$db" --schema "$schema" --from redis --consumer c \
  --apply 'SELECT app.apply_order_event($1)'

# run_consumer NAME FLAG...: `outbox consume` in the background with --metrics-listen; sets
# consumer_pid and metrics_port.
run_consumer() {
  local name="$1"
  shift
  "$outbox_binary" consume --db "$db" --schema "$schema" --park-failing-after 2 \
    --retry-backoff-max 200ms --metrics-listen 127.0.0.1:0 "$@" \
    >"$work_dir/$name.out" 2>"$work_dir/$name.err" &
  consumer_pid=$!
  track_background "$consumer_pid" "consume $name"
  metrics_port="$(listening_port "$work_dir/$name.err" "$consumer_pid")" ||
    fatal --log "$work_dir/$name.err" "outbox consume $name did not serve /metrics"
}
stop_consumer() {
  local name="$1" rc=0
  kill -TERM "$consumer_pid"
  wait "$consumer_pid" || rc=$?
  if ((rc == 0)); then pass; else
    show_log "$name" "$work_dir/$name.err"
    fail "outbox consume $name should exit 0 on SIGTERM, got $rc"
  fi
}

# check_broker VIA CONSUMER: the consumer applies everything but the corrupt event, which is
# parked with o-2's later event held behind it; an operator's skip lets o-2 go on.
check_broker() {
  local via="$1" consumer="$2" metrics out deadline=$((SECONDS + 60))
  # Parked after two failures, and o-2's third held behind it: the batches in between may have
  # applied the others already.
  until [[ "$(sql -c "SELECT count(*) FILTER (WHERE kind = 'failed') || ' ' || count(*)
                      FROM $schema.inbox_parked WHERE consumer_name = '$consumer'")" == "1 2" ]] ||
    ((SECONDS > deadline)); do
    sleep 0.2
  done
  if wait_applied "$via" 5; then pass; else
    show_log "consume $via" "$work_dir/$via.err"
    fail "$via: 5 events should be applied (o-2's third held behind its parked second), got $(applied "$via")"
  fi
  out="$("$outbox_binary" inbox list --db "$db" --schema "$schema" --consumer "$consumer" 2>&1)"
  if [[ "$out" == *"$(poison_id)"*"parked (failed)"*"cannot apply OrderCorrupted of order o-2"* &&
        "$out" == *"o-2 #3 OrderCancelled"*"waiting behind parked sequence 2"* ]]; then
    pass
  else
    fail "$via: inbox list should show the parked event and the one held behind it: $out"
  fi
  metrics="$(curl -sf "http://127.0.0.1:$metrics_port/metrics")" || fail "$via: /metrics failed"
  if grep -q "^outbox_consumer_events_applied_total{consumer=\"$consumer\"} 5$" <<<"$metrics" &&
     grep -q "^outbox_consumer_effects_parked_total{consumer=\"$consumer\"} 1$" <<<"$metrics"; then
    pass
  else
    fail "$via: /metrics should count 5 applied and 1 parked: $(grep "$consumer" <<<"$metrics" | head -20)"
  fi
  "$outbox_binary" inbox skip "$(poison_id)" --db "$db" --schema "$schema" \
    --consumer "$consumer" --reason "corrupt payload" --actor ops >/dev/null
  if wait_applied "$via" 6; then pass; else fail "$via: after the skip, o-2's OrderCancelled should apply"; fi
  out="$(order_of "$via")"
  if [[ "$out" == "o-1:1,2,3 o-2:1,3 o-3:1" ]]; then pass; else
    fail "$via: each aggregate in sequence order, the skipped 2 not applied: $out"; fi
}

# --- 2. Kafka ------------------------------------------------------------------------------------
make_events
relay_until_published kafka-relay --kafka-brokers "$brokers"
run_consumer kafka --consumer projection --kafka-brokers "$brokers" --topic outbox.order \
  --apply 'SELECT app.apply_order_event($1)'
check_broker kafka projection
stop_consumer kafka
if grep -q "consumer projection: applied 6" "$work_dir/kafka.out"; then pass; else
  fail "consume should print what it did: $(cat "$work_dir/kafka.out")"; fi
if [[ "$(sql -c "SELECT status FROM app.orders WHERE id = 'o-2'")" == cancelled ]]; then pass; else
  fail "the read model should end with o-2 cancelled"; fi

# --- 3. Redis: the same events again (replayed), another consumer name, a settings file ----------
"$outbox_binary" replay --db "$db" --schema "$schema" --aggregate-type order --since 1h --wait 0 \
  --reason redis --actor ops >/dev/null 2>&1 || fatal "replay failed"
relay_until_published redis-relay --sink redis --redis-url "$redis_url" --redis-partitions 4
# Its settings from a configuration file, as the systemd unit (outbox-consume@.service) runs it.
cat >"$work_dir/consume-redis.toml" <<TOML
[consume]
from = "redis"
redis-url = "$redis_url"
redis-aggregate-type = ["order"]
redis-partitions = 4
apply = "SELECT app.apply_order_event(\$1, 'redis')"
TOML
run_consumer redis --consumer projection-redis --config "$work_dir/consume-redis.toml"
check_broker redis projection-redis
stop_consumer redis

# --- 4. schema evolution in SQL: v1 upcast to v2 before --apply; v3, newer, parked ---------------
sql <<'SQL'
CREATE TABLE app.prices (n bigserial, id text, sequence bigint, amount text, version int);
CREATE FUNCTION app.price_v1_to_v2(p jsonb) RETURNS jsonb LANGUAGE sql
  AS $$ SELECT jsonb_build_object('amount', to_char((p->>'cents')::numeric / 100, 'FM0.00')) $$;
CREATE FUNCTION app.apply_price(e jsonb) RETURNS void LANGUAGE sql AS $$
  INSERT INTO app.prices (id, sequence, amount, version)
  VALUES (e->>'aggregate_id', (e->>'aggregate_sequence')::bigint, e->'payload'->>'amount',
          (e->>'schema_version')::int) $$;
SQL
price() {
  "$outbox_binary" enqueue --db "$db" --schema "$schema" --aggregate-type price \
    --aggregate-id p-1 --event-type PriceSet --schema-version "$1" --payload "$2" >/dev/null
}
price 1 '{"cents": 250}'
price 2 '{"amount": "3.10"}'
price 3 '{"amount": {"value": "4.00", "currency": "EUR"}}'
price 1 '{"cents": 500}'
relay_until_published price-relay --kafka-brokers "$brokers"
run_consumer prices --consumer prices --kafka-brokers "$brokers" --topic outbox.price \
  --upcast PriceSet:1=app.price_v1_to_v2 --current-version PriceSet=2 \
  --apply 'SELECT app.apply_price($1)'
deadline=$((SECONDS + 60))
until [[ "$(sql -c "SELECT count(*) FROM $schema.inbox_parked WHERE consumer_name = 'prices'")" == 2 ]] ||
  ((SECONDS > deadline)); do
  sleep 0.2
done
out="$(sql -c "SELECT string_agg(sequence || '=' || amount || '@v' || version, ' ' ORDER BY n) FROM app.prices")"
if [[ "$out" == "1=2.50@v2 2=3.10@v2" ]]; then pass; else
  fail "v1 should be upcast to v2 before --apply, and nothing after the v3 applied: $out"; fi
out="$("$outbox_binary" inbox list --db "$db" --schema "$schema" --consumer prices 2>&1)"
if [[ "$out" == *"p-1 #3 PriceSet v3  parked (unknown_version)"*"schema_version 3 of PriceSet is newer than this consumer knows (2)"* &&
      "$out" == *"p-1 #4 PriceSet v1  waiting"* ]]; then
  pass
else
  fail "the v3 event should be parked as unknown, the next held behind it: $out"
fi
stop_consumer prices
expect_failure "--upcast without a version" "expected EVENT_TYPE:FROM_VERSION=FUNCTION" \
  "$outbox_binary" consume "${consume_flags[@]}" --consumer c --upcast PriceSet=app.f \
  --apply 'SELECT app.apply_price($1)'
expect_failure "--upcast with no function name" "is no function name" \
  "$outbox_binary" consume "${consume_flags[@]}" --consumer c --upcast 'PriceSet:1=app.f(); DROP' \
  --apply 'SELECT app.apply_price($1)'

summary_and_exit
