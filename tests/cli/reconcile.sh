#!/usr/bin/env bash
# `outbox reconcile` as an operator runs it, against a status endpoint (python3's http.server)
# that knows which events happened: list; check --dry-run settles nothing; check settles what the
# endpoint answers for (200: published, 404: sent again), leaves what is too recent (--min-age)
# or answered otherwise, and first refuses an endpoint that answers 200 for an event never sent
# (a catch-all would mark events published that never were); decisions by hand are audited and
# only for events in doubt; a long UTF-8 answer does not stop the check.
#
# Usage: reconcile.sh /path/to/outbox
set -euo pipefail

readonly outbox_binary="${1:?usage: reconcile.sh /path/to/outbox}"
readonly schema=pay

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init reconcile outbox-reconcile-test

start_postgres
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
reconcile() { "$outbox_binary" reconcile --db "$db" --schema "$schema" "$@"; }

# Five events; the first four in doubt for a minute, the fifth since now.
for i in 1 2 3 4 5; do
  "$outbox_binary" enqueue --db "$db" --schema "$schema" --aggregate-type charge \
    --aggregate-id "c-$i" --event-type ChargeRequested --payload "{\"n\": $i}" >/dev/null
done
sql -c "UPDATE $schema.outbox_events SET in_doubt_at = now() - interval '1 minute',
          in_doubt_reason = 'no status after the request was sent: timeout',
          available_at = 'infinity', attempt_count = 1"
sql -c "UPDATE $schema.outbox_events SET in_doubt_at = now() WHERE aggregate_id = 'c-5'"
id_of() { sql -c "SELECT event_id FROM $schema.outbox_events WHERE aggregate_id = '$1'"; }
happened="$(id_of c-1)"
long_answer="$(id_of c-3)"
not_in_doubt() { sql -c "SELECT count(*) FROM $schema.outbox_events WHERE in_doubt_at IS NULL"; }

# The status endpoint: 200 for c-1, a 500 with a long non-ASCII body for c-3, 404 for the rest;
# with the file "$work_dir/catch-all" present, 200 for everything.
cat >"$work_dir/status.py" <<PY
import http.server, os, sys
class Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        key = self.path.rsplit("/", 1)[-1]
        if os.path.exists("$work_dir/catch-all") or key == "$happened":
            self.send_response(200); self.end_headers(); self.wfile.write(b"charged")
        elif key == "$long_answer":
            self.send_response(500); self.end_headers(); self.wfile.write(("é" * 150).encode())
        else:
            self.send_response(404); self.end_headers()
    def log_message(self, *args): pass
server = http.server.HTTPServer(("127.0.0.1", 0), Status)
print(f"listening {server.server_port}", flush=True)
server.serve_forever()
PY
python3 "$work_dir/status.py" >"$work_dir/status.log" 2>&1 &
status_pid=$!
track_background "$status_pid" "status endpoint"
first="$(wait_for_first_line "$status_pid" "$work_dir/status.log" 20)" ||
  fatal "the status endpoint did not start: $(cat "$work_dir/status.log")"
status_url="http://127.0.0.1:${first#listening }/status/{event_id}"

listed="$(reconcile list)"
if [[ "$listed" == *"5 event(s) in doubt"* && "$listed" == *"c-1 #1 ChargeRequested"* ]]; then
  pass
else
  fail "reconcile list should show five events in doubt: $listed"
fi

# --dry-run asks and settles nothing.
out="$(reconcile check --status-url "$status_url" --actor ops --dry-run || true)"
if [[ "$out" == *"would settle as published: HTTP 200"* && "$(not_in_doubt)" == 0 ]]; then
  pass
else
  fail "check --dry-run should only say what it would do: $out"
fi

# A catch-all endpoint is refused before anything is settled.
touch "$work_dir/catch-all"
expect_failure "a status URL that answers 200 for anything" "must answer 404 there" \
  reconcile check --status-url "$status_url" --actor ops
if [[ "$(not_in_doubt)" == 0 ]]; then pass; else fail "the refused check settled something"; fi
rm "$work_dir/catch-all"

# The check: c-1 published, c-2 and c-4 sent again, c-3 (500) and c-5 (too recent) stay; exit 1.
rc=0
out="$(reconcile check --status-url "$status_url" --actor ops)" || rc=$?
if ((rc == 1)) && [[ "$out" == *"3 of 5 event(s) in doubt settled"* ]]; then pass; else
  fail "check should settle three and exit 1: rc $rc: $out"
fi
published="$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NOT NULL")"
due="$(sql -c "SELECT count(*) FROM $schema.outbox_events WHERE in_doubt_at IS NULL
                AND published_at IS NULL AND available_at <= now() AND attempt_count = 0")"
left="$(sql -c "SELECT string_agg(aggregate_id, ',' ORDER BY aggregate_id) FROM $schema.outbox_events
                 WHERE in_doubt_at IS NOT NULL")"
if [[ "$published" == 1 && "$due" == 2 && "$left" == "c-3,c-5" ]]; then pass; else
  fail "after check: published $published (want 1), due again $due (want 2), left $left: $out"
fi
if [[ "$out" == *"too recent"* && "$out" == *"HTTP 500"* ]]; then pass; else
  fail "check should name the recent one and the 500: $out"
fi
audit="$(sql -c "SELECT string_agg(action, ',' ORDER BY action) FROM $schema.outbox_operator_audit")"
if [[ "$audit" == "reconcile_published,reconcile_retry,reconcile_retry" ]]; then pass; else
  fail "audit rows: $audit"
fi

# By hand: only events in doubt, with a reason.
expect_failure "a decision without a reason" "--reason" reconcile skip "$long_answer" --actor ops
rc=0
out="$(reconcile skip "$long_answer" "$happened" --actor ops --reason "refunded by hand")" || rc=$?
if ((rc == 1)) && [[ "$out" == *"1 of 2"* && "$out" == *"$happened: published at"* ]]; then pass
else fail "skip of one in doubt and one published: rc $rc: $out"; fi
expect_failure "an id that is not a UUID" "is not an event id" reconcile retry nope --reason x

summary_and_exit
