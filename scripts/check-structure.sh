#!/usr/bin/env bash
# The structure's rules that a build does not check (docs/ARCHITECTURE.md):
#   1. no include cycle between folders of src/: each folder's includes of another folder's
#      headers are edges, and tsort fails on a loop (a folder's includes of itself do not count);
#   2. no file of src/ over 500 lines;
#   3. no function of src/ over 60 lines (universal-ctags finds them), except one that holds SQL
#      text (a raw string R"SQL(...)": a statement reads best whole).
# Run by `make test`; exits 1 with the loop, the files or the functions named.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
  echo "check-structure: FAIL: files of src/ over 500 lines (split them by job):" >&2
  echo "$long" >&2
  status=1
else
  echo "check-structure: no file of src/ over 500 lines"
fi

# "lines file:line name" for each function of over 60 lines whose text holds no R"SQL(.
functions="$(find src -name '*.cpp' | sort | while read -r file; do
  ctags --language-force=C++ --kinds-C++=f --fields=+ne -o - "$file" |
    awk -F'\t' -v file="$file" '{
      start = end = 0
      for (i = 4; i <= NF; i++) {
        if ($i ~ /^line:/) start = substr($i, 6)
        if ($i ~ /^end:/) end = substr($i, 5)
      }
      if (end - start + 1 > 60) print start, end, $1
    }' |
    while read -r start end name; do
      # One process, no pipe: `grep -q` quitting early made sed's SIGPIPE fail the pipeline
      # under pipefail, now and then, on a function that does hold SQL.
      if ! awk -v s="$start" -v e="$end" 'NR >= s && NR <= e && /R"SQL\(/ { found = 1; exit }
                                          END { exit !found }' "$file"; then
        echo "$((end - start + 1)) $file:$start $name"
      fi
    done
done)"
if [[ -n "$functions" ]]; then
  echo "check-structure: FAIL: functions of src/ over 60 lines (call named helpers):" >&2
  echo "$functions" >&2
  status=1
else
  echo "check-structure: no function of src/ over 60 lines but SQL text"
fi
exit "$status"
