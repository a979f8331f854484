#!/usr/bin/env bash
# The operator's program carries no embedded server: no symbol of EmbeddedPostgres or
# KafkaMockCluster is in `outbox`. outbox-dev has them, which shows the check can see them.
#
# Usage: operator_binary.sh /path/to/outbox /path/to/outbox-dev
set -euo pipefail

readonly outbox_binary="${1:?usage: operator_binary.sh /path/to/outbox /path/to/outbox-dev}"
readonly dev_binary="${2:?usage: operator_binary.sh /path/to/outbox /path/to/outbox-dev}"
readonly servers='outbox::(EmbeddedPostgres|KafkaMockCluster)::'

dev_symbols="$(nm -C "$dev_binary")"
if ! grep -E "$servers" <<<"$dev_symbols" >/dev/null; then
  echo "operator_binary: FAIL: no embedded server symbol found even in $dev_binary" >&2
  exit 1
fi
symbols="$(nm -C "$outbox_binary")"  # a failing nm stops the test (set -e), never passes it
found="$(grep -E "$servers" <<<"$symbols" || true)"
if [[ -n "$found" ]]; then
  echo "operator_binary: FAIL: $outbox_binary links the embedded servers:" >&2
  sed -n 1,3p <<<"$found" >&2
  exit 1
fi
echo "operator_binary: 1 passed, 0 failed ($outbox_binary links no embedded server)"
