#!/usr/bin/env bash
# `make package` as a user meets it: CPack builds the Debian package from the build tree; its
# control file depends on the runtime libraries (dpkg-shlibdeps) and adduser; it holds the
# operator's program, the libraries, headers and CMake package, the systemd units with ExecStart at
# /usr/bin/outbox, the docs, and not outbox-dev; its postinst makes the system user the units run
# as (run here against stand-ins for adduser and getent: the test machine's users stay as they
# are). Unpacked with dpkg -x, its outbox runs and examples/order_service builds against it alone.
#
# Usage: package.sh SOURCE_DIR BUILD_DIR
set -euo pipefail

readonly source_dir="${1:?usage: package.sh SOURCE_DIR BUILD_DIR}"
readonly build_dir="${2:?usage: package.sh SOURCE_DIR BUILD_DIR}"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init package outbox-package-test

# --- 1. the package -------------------------------------------------------------------------------
if ! (cd "$build_dir" && cpack -G DEB -B "$work_dir/out") >"$work_dir/cpack.log" 2>&1; then
  fatal --log "$work_dir/cpack.log" "cpack -G DEB failed"
fi
deb="$(ls "$work_dir"/out/outbox_*_*.deb 2>/dev/null | head -1)"
[[ -n "$deb" ]] || fatal --log "$work_dir/cpack.log" "no outbox_*.deb in $work_dir/out"
pass

# --- 2. what it says and holds ----------------------------------------------------------------------
control="$(dpkg-deb -f "$deb" Package Depends Section)"
if [[ "$control" == *"Package: outbox"* && "$control" == *"libpq5"* && "$control" == *"librdkafka1"* &&
      "$control" == *"adduser"* ]]; then
  pass
else
  fail "the control file should name outbox and depend on libpq5, librdkafka1 and adduser: $control"
fi
contents="$(dpkg-deb -c "$deb" | awk '{print $6}')"
for path in ./usr/bin/outbox ./usr/include/outbox/producer.hpp ./usr/include/outbox/pqxx.hpp \
  ./usr/lib/cmake/outbox/outboxConfig.cmake ./usr/lib/systemd/system/outbox-relay.service \
  ./usr/lib/systemd/system/outbox-admin.service ./usr/share/doc/outbox/OPERATIONS.md \
  ./usr/share/doc/outbox/PRODUCING.md ./usr/share/doc/outbox/ops/alerts.yml; do
  if grep -qx -- "$path" <<<"$contents"; then pass; else fail "the package lacks $path"; fi
done
if grep -q 'outbox-dev' <<<"$contents"; then
  fail "the package should not hold outbox-dev (the throwaway servers): $(grep outbox-dev <<<"$contents")"
else
  pass
fi

# --- 3. unpacked: the program runs, the units name it, the example builds against it ------------
root="$work_dir/root"
dpkg -x "$deb" "$root"
if "$root/usr/bin/outbox" --help 2>&1 | grep -q 'enqueue'; then pass; else
  fail "the packaged outbox should run and list its commands"
fi
unit="$(cat "$root/usr/lib/systemd/system/outbox-relay.service")"
if [[ "$unit" == *"ExecStart=/usr/bin/outbox relay"* && "$unit" == *"User=outbox"* &&
      "$unit" != *"/usr/local/bin"* ]]; then
  pass
else
  fail "the packaged relay unit should run /usr/bin/outbox as the user outbox"
fi
if cmake -S "$source_dir/examples/order_service" -B "$work_dir/example" \
  -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work_dir/example.log" 2>&1 &&
  cmake --build "$work_dir/example" >>"$work_dir/example.log" 2>&1 &&
  [[ "$(sed -n 's/^outbox_DIR:PATH=//p' "$work_dir/example/CMakeCache.txt")" == "$root/usr/"* ]]; then
  pass
else
  show_log "example build" "$work_dir/example.log"
  fail "examples/order_service should build against the unpacked package alone"
fi

# --- 4. postinst: the system user, made once ------------------------------------------------------
control_dir="$work_dir/control"
dpkg-deb -e "$deb" "$control_dir"
stubs="$work_dir/stubs"
mkdir -p "$stubs"
printf '#!/bin/sh\necho "$@" >>"%s/adduser.calls"\n' "$work_dir" >"$stubs/adduser"
printf '#!/bin/sh\n[ -f "%s/adduser.calls" ]\n' "$work_dir" >"$stubs/getent"  # known once made
printf '#!/bin/sh\nexit 0\n' >"$stubs/install"
chmod +x "$stubs"/*
PATH="$stubs:$PATH" sh "$control_dir/postinst" configure
PATH="$stubs:$PATH" sh "$control_dir/postinst" configure  # an upgrade: no second user
calls="$(cat "$work_dir/adduser.calls" 2>/dev/null || true)"
if [[ "$(wc -l <<<"$calls")" == 1 && "$calls" == *"--system"*"--group"*"outbox"* ]]; then
  pass
else
  fail "postinst should make the system user outbox once: adduser was called with: $calls"
fi

summary_and_exit
