#!/usr/bin/env bash
# `make package` as a user meets it: CPack builds the Debian package from the build tree; its
# control file depends on the runtime libraries (dpkg-shlibdeps) and adduser; it holds the
# operator's program, the libraries, headers and CMake package, the systemd units with ExecStart at
# /usr/bin/outbox, the docs, and not outbox-dev; its postinst makes the system user the units run
# as, once, and postrm keeps it on purge (run here against stand-ins for adduser, deluser and
# getent: the test machine's users stay as they are); prerm stops the units on removal. Unpacked
# with dpkg -x, its outbox runs and examples/hello_outbox builds against it alone.
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
  ./usr/lib/systemd/system/outbox-admin.service ./usr/lib/systemd/system/outbox-consume@.service \
  ./usr/share/doc/outbox/OPERATIONS.md ./usr/share/doc/outbox/CONSUMING.md \
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
unit="$(cat "$root/usr/lib/systemd/system/outbox-consume@.service")"
if [[ "$unit" == *"ExecStart=/usr/bin/outbox consume"* && "$unit" == *"--consumer %i"* &&
      "$unit" == *"User=outbox"* && "$unit" != *"/usr/local/bin"* ]]; then
  pass
else
  fail "the packaged consume unit should run /usr/bin/outbox consume --consumer %i as outbox"
fi
if cmake -S "$source_dir/examples/hello_outbox" -B "$work_dir/example" \
  -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work_dir/example.log" 2>&1 &&
  cmake --build "$work_dir/example" >>"$work_dir/example.log" 2>&1 &&
  [[ "$(sed -n 's/^outbox_DIR:PATH=//p' "$work_dir/example/CMakeCache.txt")" == "$root/usr/"* ]]; then
  pass
else
  show_log "example build" "$work_dir/example.log"
  fail "examples/hello_outbox should build against the unpacked package alone"
fi

# --- 4. maintainer scripts: the system user made once and kept; the units stopped on removal ------
control_dir="$work_dir/control"
dpkg-deb -e "$deb" "$control_dir"
for script in postinst prerm postrm; do
  if [[ -x "$control_dir/$script" ]] && sh -n "$control_dir/$script"; then pass; else
    fail "the package should carry an executable $script that parses"
  fi
done
if grep -q 'systemctl stop outbox-relay.service' "$control_dir/prerm"; then pass; else
  fail "prerm should stop the units on removal"
fi
stubs="$work_dir/stubs"
mkdir -p "$stubs"
calls="$work_dir/calls"
: >"$calls"
# adduser and deluser record their calls; getent knows the user once adduser made it.
printf '#!/bin/sh\necho "adduser $*" >>"%s"\n' "$calls" >"$stubs/adduser"
printf '#!/bin/sh\necho "deluser $*" >>"%s"\n' "$calls" >"$stubs/deluser"
printf '#!/bin/sh\n[ "$1" = passwd ] && [ "$2" = outbox ] && grep -q "^adduser" "%s"\n' "$calls" \
  >"$stubs/getent"
printf '#!/bin/sh\nexit 0\n' >"$stubs/install"
chmod +x "$stubs"/*
PATH="$stubs:$PATH" sh "$control_dir/postinst" configure
PATH="$stubs:$PATH" sh "$control_dir/postinst" configure 0.1.0  # an upgrade: no second user
PATH="$stubs:$PATH" sh "$control_dir/postrm" purge
recorded="$(cat "$calls")"
if [[ "$(grep -c '^adduser' <<<"$recorded")" == 1 && "$recorded" == *"--system"*"--group"*"outbox"* &&
      "$recorded" != *deluser* ]]; then
  pass
else
  fail "postinst should make the system user outbox once, and purge keep it: $recorded"
fi

summary_and_exit
