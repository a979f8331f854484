#!/usr/bin/env bash
# The structure's rules that a build does not check (docs/ARCHITECTURE.md):
#   1. no include cycle between folders of src/: each folder's includes of another folder's
#      headers are edges, and tsort fails on a loop (a folder's includes of itself do not count);
#   2. the files of src/ over 500 lines, listed (a limit the code is being brought under: issue 24;
#      --strict makes it fail).
# Run by `make test`; exits 1 with the loop or the files named.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

strict=false
[[ "${1:-}" == --strict ]] && strict=true

# "includer-folder included-folder" per include of a header under src/ from another folder.
edges="$(grep -rHoE '^#include "[a-z_/]+\.hpp"' src | while IFS=: read -r file include; do
  header="${include#\#include \"}"
  header="${header%\"}"
  [[ -f "src/$header" ]] || continue
  from="$(dirname "${file#src/}")"
  to="$(dirname "$header")"
  if [[ "$from" != "$to" ]]; then echo "$from $to"; fi
done | sort -u)"

status=0
if ! loop="$(tsort <<<"$edges" 2>&1 >/dev/null)" || [[ -n "$loop" ]]; then
  echo "check-structure: FAIL: the folders of src/ include each other:" >&2
  echo "$loop" >&2
  echo "the edges (includer included):" >&2
  echo "$edges" >&2
  status=1
else
  echo "check-structure: no include cycle between the folders of src/ ($(wc -l <<<"$edges") edges)"
fi

long="$(find src -name '*.[ch]pp' -print0 | xargs -0 wc -l | awk '$2 != "total" && $1 > 500' |
  sort -rn)"
if [[ -n "$long" ]]; then
  echo "check-structure: files of src/ over 500 lines:"
  echo "$long"
  if $strict; then status=1; fi
fi
exit "$status"
