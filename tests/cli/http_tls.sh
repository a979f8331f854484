#!/usr/bin/env bash
# The HTTP sink over TLS as an operator meets it: an endpoint with a certificate from a CA of the
# test's own (openssl) is refused while the relay trusts only the system's CAs (nothing is sent:
# the event stays pending, the relay says why), and reached with --http-ca-file naming that CA.
# A proxy in the environment (https_proxy) is ignored unless --http-proxy-from-env asks for it.
#
# Usage: http_tls.sh /path/to/outbox
# Needs: openssl, python3, psql, PostgreSQL server binaries (found by `outbox-dev postgres`).
set -euo pipefail

readonly outbox_binary="${1:?usage: http_tls.sh /path/to/outbox}"
readonly schema=hooks

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init http_tls outbox-http-tls-test

start_postgres
"$outbox_binary" migrate --db "$db" --schema "$schema" >/dev/null 2>&1 || fatal "migrate failed"
pending() { sql -c "SELECT count(*) FROM $schema.outbox_events WHERE published_at IS NULL"; }

# A CA and a certificate for 127.0.0.1 signed by it.
cd "$work_dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=outbox test CA" \
  -keyout ca.key -out ca.pem >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key \
  -out server.csr >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile san.ext -out server.pem >/dev/null 2>&1
cd - >/dev/null

# The endpoint: answers 204 to every POST and counts them.
cat >"$work_dir/endpoint.py" <<PY
import http.server, ssl
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with open("$work_dir/received", "a") as f:
            f.write(self.headers.get("Idempotency-Key", "") + "\n")
        self.send_response(204); self.end_headers()
    def log_message(self, *args): pass
server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("$work_dir/server.pem", "$work_dir/server.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
print(f"listening {server.server_port}", flush=True)
server.serve_forever()
PY
python3 "$work_dir/endpoint.py" >"$work_dir/endpoint.log" 2>&1 &
endpoint_pid=$!
track_background "$endpoint_pid" "TLS endpoint"
first="$(wait_for_first_line "$endpoint_pid" "$work_dir/endpoint.log" 20)" ||
  fatal "the TLS endpoint did not start: $(cat "$work_dir/endpoint.log")"
readonly url="https://127.0.0.1:${first#listening }/hooks/{aggregate_id}"

"$outbox_binary" enqueue --db "$db" --schema "$schema" --aggregate-type charge \
  --aggregate-id c-1 --event-type Charged --payload '{"cents": 100}' >/dev/null

# relay_for SECONDS ARGS...: runs a relay that long, its output in "$work_dir/relay.log".
relay_for() {
  local seconds="$1"
  shift
  timeout -s TERM "$seconds" "$outbox_binary" relay --db "$db" --schema "$schema" --sink http \
    --http-url "$url" --backoff-base-ms 100 --backoff-max-ms 500 "$@" >"$work_dir/relay.log" 2>&1 ||
    true
}

# 1. The system's CAs do not know the test's CA: refused, nothing sent.
relay_for 3
if [[ "$(pending)" == 1 && ! -s "$work_dir/received" ]]; then pass; else
  fail "an endpoint with an unknown CA was sent to (pending $(pending))"
fi
if grep -q "not sent: .*certificate" "$work_dir/relay.log"; then pass; else
  fail "the relay should say the certificate was not trusted: $(tail -5 "$work_dir/relay.log")"
fi

# 2. A proxy in the environment that does not exist: ignored without --http-proxy-from-env, so
#    with the CA the event goes out.
https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
  relay_for 4 --http-ca-file "$work_dir/ca.pem"
if [[ "$(pending)" == 0 && "$(wc -l <"$work_dir/received")" -ge 1 ]]; then pass; else
  fail "with --http-ca-file the event should be published: $(tail -5 "$work_dir/relay.log")"
fi

# 3. With --http-proxy-from-env the same dead proxy is used: not sent.
"$outbox_binary" enqueue --db "$db" --schema "$schema" --aggregate-type charge \
  --aggregate-id c-2 --event-type Charged --payload '{"cents": 200}' >/dev/null
https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
  relay_for 3 --http-ca-file "$work_dir/ca.pem" --http-proxy-from-env
if [[ "$(pending)" == 1 ]] && grep -q "not sent" "$work_dir/relay.log"; then pass; else
  fail "--http-proxy-from-env should go through the (dead) proxy: $(tail -5 "$work_dir/relay.log")"
fi

summary_and_exit
