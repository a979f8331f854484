#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages needed to build and test outbox, and only those missing.
# Quiet when everything is present, so `make build` can call it every time.
set -euo pipefail

packages=(
  build-essential cmake pkg-config g++
  libpq-dev postgresql-15 postgresql-contrib
  libcurl4-openssl-dev libssl-dev  # outbox::http, the HTTP sink (libcurl; HMAC for webhook signatures)
  libnats-dev nats-server  # outbox::nats, the NATS JetStream sink (nats.c); the tests start nats-server -js
  librabbitmq-dev rabbitmq-server  # outbox::rabbitmq, the RabbitMQ sink (rabbitmq-c); the tests start their own node
  libhiredis-dev redis-server  # outbox::redis, the Redis Streams sink (hiredis); the tests start their own redis-server
  libpqxx-dev  # outbox::pqxx, the producer in a libpqxx transaction (include/outbox/pqxx.hpp)
  librdkafka-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev
  libsimdjson-dev  # the CDC relay reads table-less events' messages with simdjson
  libjemalloc-dev  # the outbox program's allocator
  prometheus-cpp-dev libcpp-httplib-dev  # outbox::observe: the metrics text format, HTTP
  libtomlplusplus-dev  # outbox --config outbox.toml
  prometheus  # promtool checks what is served and the alert rules; the alert drill runs the server
  chromium chromium-driver python3-selenium python3-pil  # tests/cli/admin_page.sh: clicks, and the headline's colour
  curl  # the observability tests ask the HTTP endpoints
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang-format clang-tidy
  universal-ctags  # scripts/check-structure.sh measures functions
  clang libclang-rt-14-dev  # the fuzz tests (tests/fuzz): clang++ -fsanitize=fuzzer,address,undefined
  python3  # the bench smoke test reads results.json
  openssl  # the TLS test makes its own CA
  kcat  # tests/cli/relay_cdc.sh reads what reached Kafka as operators do
  time  # tests/cli/relay_memory.sh (ctest -L slow) reads the relay's peak RSS from GNU time
  nodejs  # tests/cli/http_interop.sh: webhook and CloudEvents libraries of other authors (npm)
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: dpkg-query not found; this script supports Debian/Ubuntu only." >&2
  echo "install-deps: install the equivalents of: ${packages[*]}" >&2
  exit 1
fi

missing=()
for package in "${packages[@]}"; do
  # "install ok installed" only; a removed package whose config files remain reports otherwise.
  status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root (or with sudo):" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# npm, after nodejs: NodeSource's nodejs package carries npm and conflicts with Debian's npm
# package, Debian's own nodejs does not carry it. So Debian's npm only when no npm came with node.
if ! command -v npm >/dev/null 2>&1; then
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "install-deps: npm missing (nodejs came without it); run as root (or with sudo):" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends npm" >&2
    exit 1
  fi
  echo "install-deps: installing npm"
  if [[ ${#missing[@]} -eq 0 ]]; then apt-get update; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm
elif [[ ${#missing[@]} -eq 0 ]]; then
  echo "all build dependencies present"
fi
