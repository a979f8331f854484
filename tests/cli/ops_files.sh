#!/usr/bin/env bash
# Checks the operator's files against each other and against what the processes really serve:
# docs/ops/alerts.yml (promtool check rules), docs/ops/alerts_test.yml (promtool test rules; every
# alert has a case that fires it and one that must not), the runbook (every alert's runbook_url
# names a heading of docs/OPERATIONS.md; its Prometheus snippet passes promtool check config),
# docs/ops/grafana-dashboard.json (valid JSON, the ${DS_PROMETHEUS} data source everywhere, every
# expr valid PromQL) and the metric names: every name the dashboard's and the alerts' exprs use
# must have a `# TYPE` line in one of METRICS_FILE (the /metrics text of real processes: a relay
# with --metrics-listen, `outbox admin`, a consumer). Without METRICS_FILE that check fails: it
# never passes by having nothing to compare with. The name checker first proves on a made-up
# dashboard that it reports an unknown name.
#
# Usage: ops_files.sh REPO_DIR [METRICS_FILE...]
# Needs: promtool (Debian package prometheus) and python3 on PATH.
set -euo pipefail

readonly repo_dir="${1:?usage: ops_files.sh REPO_DIR [METRICS_FILE...]}"
shift
metrics_files=("$@")
readonly runbook_prefix='https://github.com/outbox/outbox/blob/main/docs/OPERATIONS.md#'

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_test_init ops_files outbox-ops-files

readonly alerts="$repo_dir/docs/ops/alerts.yml"
readonly alerts_test="$repo_dir/docs/ops/alerts_test.yml"
readonly dashboard="$repo_dir/docs/ops/grafana-dashboard.json"
readonly operations="$repo_dir/docs/OPERATIONS.md"

for tool in promtool python3; do
  command -v "$tool" >/dev/null ||
    fatal "$tool is not on PATH (promtool: Debian package prometheus, or a Prometheus release)"
done
for file in "$alerts" "$alerts_test" "$dashboard" "$operations"; do
  [[ -f "$file" ]] || fatal "missing $file"
done

# --- the parsers, in one Python file (standard library only) ------------------------------------
readonly helper="$work_dir/ops_check.py"
cat >"$helper" <<'PY'
"""Helpers of ops_files.sh. Each mode prints tab-separated lines; errors go to stderr, exit 1."""
import json
import re
import sys

# Words of PromQL that are not metric names when not followed by "(": binary and set operators,
# modifiers, and the literals Inf/NaN. Functions and aggregations are recognised by their "(".
KEYWORDS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "inf", "nan", "atan2", "sum", "min", "max", "avg", "group",
            "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
ALLOWED = {"up"}  # made by Prometheus itself for every target


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def alerts(path):
    """alert name, expr, runbook_url of every alert rule; the file keeps each expr on one line."""
    rules, current = [], None
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if re.match(r"\s*#", line):
            continue
        m = re.match(r"\s*-\s+(alert|record):\s*(\S.*?)\s*$", line)
        if m:
            current = {"kind": m.group(1), "name": m.group(2).strip("'\""), "expr": None,
                       "runbook_url": None, "line": number}
            rules.append(current)
            continue
        m = re.match(r"\s*(expr|runbook_url):\s*(.*?)\s*$", line)
        if m and current is not None:
            value = m.group(2)
            if m.group(1) == "expr" and (value == "" or value[0] in "|>"):
                fail(f"{path}:{number}: the expr of {current['name']} is not on one line; "
                     "keep it one plain line (tests rewrite its threshold with sed)")
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            current[m.group(1)] = value
    for rule in rules:
        if rule["expr"] is None:
            fail(f"{path}:{rule['line']}: {rule['name']} has no expr")
        if rule["kind"] == "alert":
            print(f"{rule['name']}\t{rule['expr']}\t{rule['runbook_url'] or ''}")


def heading_anchor(text):
    """GitHub's anchor of a heading: inline markup dropped, lowercase, punctuation dropped
    (letters, digits, '_', '-' and spaces stay), spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](link) -> text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """anchor, heading text of every ATX heading outside fenced code blocks (GitHub numbers
    repeated anchors -1, -2, ...)."""
    seen, fence = {}, None
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\s{0,3}(`{3,}|~{3,})", line)
        if m:
            if fence is None:
                fence = m.group(1)[0]
            elif m.group(1)[0] == fence:
                fence = None
            continue
        if fence is not None:
            continue
        m = re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = heading_anchor(m.group(1))
        anchor = base if base not in seen else f"{base}-{seen[base]}"
        seen[base] = seen.get(base, 0) + 1
        print(f"{anchor}\t{m.group(1)}")


def tested(path):
    """alert name, firing|quiet for every alert_rule_test case: quiet when exp_alerts is []."""
    name = None
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"\s*-?\s*alertname:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*$", line)
        if m:
            name = m.group(1)
            continue
        m = re.match(r"\s*exp_alerts:\s*(.*?)\s*(#.*)?$", line)
        if m and name is not None:
            print(f"{name}\t{'quiet' if m.group(1) == '[]' else 'firing'}")
            name = None


def dashboard_exprs(path):
    """Every expr of the dashboard (any "expr" key, also in rows' panels), one per line; also
    checks the data source of panels and targets and that panel ids are unique."""
    try:
        board = json.load(open(path, encoding="utf-8"))
    except ValueError as error:
        fail(f"{path}: not valid JSON: {error}")
    problems, ids, exprs = [], {}, []

    def walk_panels(panels):
        for panel in panels:
            if panel.get("id") in ids:
                problems.append(f"panel id {panel.get('id')} used twice")
            ids[panel.get("id")] = True
            if panel.get("type") != "row":
                uid = (panel.get("datasource") or {}).get("uid")
                if uid != "${DS_PROMETHEUS}":
                    problems.append(f"panel {panel.get('title')!r}: datasource uid {uid!r}, "
                                    "expected ${DS_PROMETHEUS}")
                for target in panel.get("targets", []):
                    uid = (target.get("datasource") or {}).get("uid")
                    if uid != "${DS_PROMETHEUS}":
                        problems.append(f"panel {panel.get('title')!r} target "
                                        f"{target.get('refId')}: datasource uid {uid!r}")
                    if not target.get("expr"):
                        problems.append(f"panel {panel.get('title')!r} target "
                                        f"{target.get('refId')}: no expr")
            walk_panels(panel.get("panels", []))

    walk_panels(board.get("panels", []))
    variables = [v.get("name") for v in board.get("templating", {}).get("list", [])]
    if "DS_PROMETHEUS" not in variables:
        problems.append("no templating variable DS_PROMETHEUS")

    def collect(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    exprs.append(" ".join(value.split()))
                else:
                    collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    collect(board)
    if problems:
        fail(f"{path}: " + "; ".join(problems))
    for expr in exprs:
        print(expr)


def metric_names(expr):
    """The metric names an expr selects: strings, label matchers, ranges, Grafana variables,
    grouping clauses and numbers removed; an identifier followed by "(" is a function."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"' r"|'(?:[^'\\]|\\.)*'|`[^`]*`", " ", expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?[0-9A-Za-z]+", " ", s)
    names = []
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # the exponent or hex digits of a number: 1e3, 0x1f
        if s[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.group(0).lower() in KEYWORDS:
            continue
        names.append(m.group(0))
    return names


def names(source_paths):
    """source, metric name of every name used: the source files hold one expr per line, or are
    alert rule files (an argument alerts:PATH)."""
    found = set()
    for source in source_paths:
        if source.startswith("alerts:"):
            path = source[len("alerts:"):]
            lines = []
            for line in open(path, encoding="utf-8"):
                m = re.match(r"\s*expr:\s*(.*?)\s*$", line)
                if m and not re.match(r"\s*#", line):
                    value = m.group(1)
                    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                        value = value[1:-1]
                    lines.append(value)
        else:
            path = source
            lines = [line.strip() for line in open(path, encoding="utf-8") if line.strip()]
        for expr in lines:
            for name in metric_names(expr):
                found.add((path, name))
    for path, name in sorted(found):
        print(f"{path}\t{name}")


def unknown(name_list, expositions):
    """Names of name_list (source TAB name lines) with no # TYPE line in the expositions; a
    histogram's _bucket/_sum/_count and a summary's _sum/_count count as its name, and so does
    name_total for an OpenMetrics `# TYPE name counter`."""
    types = {}
    for path in expositions:
        count = 0
        for line in open(path, encoding="utf-8", errors="replace"):
            m = re.match(r"#\s+TYPE\s+(\S+)\s+(\S+)", line)
            if m:
                types[m.group(1)] = m.group(2)
                count += 1
        if count == 0:
            fail(f"{path} has no '# TYPE' line: not the Prometheus text format of a /metrics page")

    def known(name):
        if name in ALLOWED or name in types:
            return True
        for suffix, kinds in (("_bucket", {"histogram", "gaugehistogram"}),
                              ("_sum", {"histogram", "summary"}),
                              ("_count", {"histogram", "summary"}),
                              ("_total", {"counter"})):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) in kinds:
                return True
        return False

    for line in open(name_list, encoding="utf-8"):
        if not line.strip():
            continue
        source, name = line.rstrip("\n").split("\t")
        if not known(name):
            print(f"{source}\t{name}")


def promql_rules(expr_file):
    """A rule file recording every expr of expr_file, Grafana's variables replaced by durations,
    for promtool check rules to parse."""
    print("groups:\n  - name: dashboard_exprs\n    rules:")
    for number, expr in enumerate(open(expr_file, encoding="utf-8"), 1):
        expr = expr.strip()
        if not expr:
            continue
        expr = re.sub(r"\$__rate_interval|\$\{__rate_interval\}", "5m", expr)
        expr = re.sub(r"\$__interval|\$\{__interval\}", "1m", expr)
        expr = re.sub(r"\$__range|\$\{__range\}", "1h", expr)
        print(f"      - record: dashboard_expr_{number}\n        expr: {json.dumps(expr)}")


def yaml_block_after(path, marker):
    """The first ```yaml block after the line holding marker."""
    lines, armed, inside = [], False, False
    for line in open(path, encoding="utf-8"):
        if not armed:
            armed = marker in line
        elif not inside:
            inside = line.strip() == "```yaml"
        elif line.strip() == "```":
            sys.stdout.write("".join(lines))
            return
        else:
            lines.append(line)
    fail(f"{path}: no ```yaml block after a line with {marker!r}")


mode, args = sys.argv[1], sys.argv[2:]
if mode == "alerts":
    alerts(args[0])
elif mode == "anchors":
    anchors(args[0])
elif mode == "tested":
    tested(args[0])
elif mode == "dashboard-exprs":
    dashboard_exprs(args[0])
elif mode == "names":
    names(args)
elif mode == "unknown":
    unknown(args[0], args[1:])
elif mode == "promql-rules":
    promql_rules(args[0])
elif mode == "yaml-block-after":
    yaml_block_after(args[0], args[1])
else:
    fail(f"unknown mode {mode}")
PY
helper() { python3 "$helper" "$@"; }

# --- 1. the rule file parses, and its unit tests pass -------------------------------------------
if output="$(promtool check rules "$alerts" 2>&1)"; then
  pass
else
  fail "promtool check rules $alerts: $output"
fi
if output="$(promtool test rules "$alerts_test" 2>&1)"; then
  pass
else
  fail "promtool test rules $alerts_test: $output"
fi

# --- 2. every alert: a runbook heading, and tests that fire it and keep it quiet -----------------
if ! helper alerts "$alerts" >"$work_dir/alerts.tsv" 2>"$work_dir/alerts.err"; then
  fatal "reading $alerts: $(cat "$work_dir/alerts.err")"
fi
if [[ ! -s "$work_dir/alerts.tsv" ]]; then fatal "no alert rule found in $alerts"; fi
helper anchors "$operations" >"$work_dir/anchors.tsv"
helper tested "$alerts_test" >"$work_dir/tested.tsv"

alert_names=()
while IFS=$'\t' read -r name _expr url; do
  alert_names+=("$name")
  if [[ "$url" != "$runbook_prefix"* ]]; then
    fail "$name: runbook_url \"$url\" does not start with $runbook_prefix"
    continue
  fi
  anchor="${url#"$runbook_prefix"}"
  heading="$(awk -F'\t' -v a="$anchor" '$1 == a { print $2; exit }' "$work_dir/anchors.tsv")"
  if [[ -z "$heading" ]]; then
    fail "$name: runbook_url anchor #$anchor is no heading of $operations"
  elif [[ "$heading" != "$name" ]]; then
    fail "$name: runbook_url anchor #$anchor is the heading \"$heading\", not \"$name\""
  else
    pass
  fi
  for kind in firing quiet; do
    if grep -qxF "$name"$'\t'"$kind" "$work_dir/tested.tsv"; then
      pass
    else
      fail "$name: $alerts_test has no case where it is expected ${kind/quiet/not to fire}" \
        "(an alert_rule_test with alertname: $name and exp_alerts ${kind/firing/listing it}${kind/quiet/: []})"
    fi
  done
done <"$work_dir/alerts.tsv"

# Cases for an alert that does not exist pass vacuously in promtool: refuse them. (Not grep -q:
# it stops reading at the first match, printf then fails on the broken pipe, and under pipefail
# the test read as absent an alert that is there; CI met it.)
while IFS=$'\t' read -r name _kind; do
  if printf '%s\n' "${alert_names[@]}" | grep -xF "$name" >/dev/null; then
    pass
  else
    fail "$alerts_test tests alert \"$name\", which $alerts does not define"
  fi
done < <(sort -u "$work_dir/tested.tsv")

# --- 3. the Prometheus configuration shown in the runbook is valid -------------------------------
# shellcheck disable=SC2016  # backquotes as the runbook writes them, not a command
readonly config_marker='ops_files.sh runs `promtool check config`'
mkdir -p "$work_dir/prometheus"
if helper yaml-block-after "$operations" "$config_marker" >"$work_dir/prometheus/prometheus.yml" \
     2>"$work_dir/config.err"; then
  cp "$alerts" "$work_dir/prometheus/outbox-alerts.yml"  # the name the snippet's rule_files uses
  if output="$(promtool check config "$work_dir/prometheus/prometheus.yml" 2>&1)"; then
    pass
  else
    fail "the Prometheus configuration in $operations (with alerts.yml as outbox-alerts.yml" \
      "next to it) fails promtool check config: $output"
  fi
else
  fail "$(cat "$work_dir/config.err")"
fi

# --- 4. the dashboard: structure, and every expr is PromQL ---------------------------------------
if helper dashboard-exprs "$dashboard" >"$work_dir/dashboard_exprs.txt" 2>"$work_dir/dash.err"; then
  pass
else
  fail "$(cat "$work_dir/dash.err")"
fi
if [[ -s "$work_dir/dashboard_exprs.txt" ]]; then
  helper promql-rules "$work_dir/dashboard_exprs.txt" >"$work_dir/dashboard_rules.yml"
  if output="$(promtool check rules "$work_dir/dashboard_rules.yml" 2>&1)"; then
    pass
  else
    fail "an expr of $dashboard is not valid PromQL (as recording rules, Grafana's \$__ variables" \
      "replaced): $output"
  fi
else
  fail "no expr found in $dashboard"
fi

# --- 5. the name checker reports a name no process serves (on a made-up dashboard) ---------------
mkdir -p "$work_dir/selfcheck"
cat >"$work_dir/selfcheck/metrics.txt" <<'METRICS'
# HELP outbox_relay_events_claimed_total Rows claimed.
# TYPE outbox_relay_events_claimed_total counter
outbox_relay_events_claimed_total 3
# TYPE outbox_relay_send_to_ack_seconds histogram
outbox_relay_send_to_ack_seconds_bucket{le="+Inf"} 1
outbox_relay_send_to_ack_seconds_sum 0.1
outbox_relay_send_to_ack_seconds_count 1
# TYPE outbox_relay_in_flight_events gauge
outbox_relay_in_flight_events 0
# TYPE outbox_relay_health gauge
outbox_relay_health{state="running"} 1
METRICS
cat >"$work_dir/selfcheck/dashboard.json" <<'JSON'
{"templating": {"list": [{"name": "DS_PROMETHEUS", "type": "datasource"}]},
 "panels": [{"id": 1, "type": "row", "panels": [
  {"id": 2, "type": "timeseries", "title": "known", "datasource": {"uid": "${DS_PROMETHEUS}"},
   "targets": [
    {"refId": "A", "datasource": {"uid": "${DS_PROMETHEUS}"},
     "expr": "sum by (instance, le) (rate(outbox_relay_events_claimed_total{state=\"not_a_metric_total\"}[$__rate_interval] offset 5m)) * 1e3"},
    {"refId": "B", "datasource": {"uid": "${DS_PROMETHEUS}"},
     "expr": "histogram_quantile(0.99, sum without (job) (rate(outbox_relay_send_to_ack_seconds_bucket[5m]))) / on(instance) group_left sum(outbox_relay_send_to_ack_seconds_count)"},
    {"refId": "C", "datasource": {"uid": "${DS_PROMETHEUS}"},
     "expr": "label_replace(max(outbox_relay_health == bool 1) and on() up, \"dst\", \"$1\", \"outbox_fake_label_source\", \"(.*)\")"}]},
  {"id": 3, "type": "timeseries", "title": "unknown", "datasource": {"uid": "${DS_PROMETHEUS}"},
   "targets": [
    {"refId": "A", "datasource": {"uid": "${DS_PROMETHEUS}"},
     "expr": "sum(rate(outbox_relay_made_up_total[5m])) + max(outbox_relay_in_flight_events_bucket)"}]}]}]}
JSON
if helper dashboard-exprs "$work_dir/selfcheck/dashboard.json" >"$work_dir/selfcheck/exprs.txt" &&
   helper names "$work_dir/selfcheck/exprs.txt" >"$work_dir/selfcheck/names.tsv" &&
   helper unknown "$work_dir/selfcheck/names.tsv" "$work_dir/selfcheck/metrics.txt" \
     >"$work_dir/selfcheck/unknown.tsv"; then
  reported="$(cut -f2 "$work_dir/selfcheck/unknown.tsv" | sort | tr '\n' ' ')"
  if [[ "$reported" == "outbox_relay_in_flight_events_bucket outbox_relay_made_up_total " ]]; then
    pass
  else
    fail "name checker self-check: expected exactly outbox_relay_in_flight_events_bucket (a gauge" \
      "has no buckets) and outbox_relay_made_up_total to be reported, got: ${reported:-nothing};" \
      "names it saw: $(cut -f2 "$work_dir/selfcheck/names.tsv" | tr '\n' ' ')"
  fi
else
  fail "name checker self-check: the checker itself failed"
fi

# --- 6. every metric the dashboard and the alerts use is served by some process ------------------
helper names "$work_dir/dashboard_exprs.txt" "alerts:$alerts" >"$work_dir/names.tsv"
sed -i "s|^$work_dir/dashboard_exprs.txt\t|$dashboard\t|" "$work_dir/names.tsv"
name_count="$(cut -f2 "$work_dir/names.tsv" | sort -u | wc -l)"
if ((name_count < 10)); then
  fail "only $name_count metric names found in $dashboard and $alerts: the name extraction is broken"
fi
if ((${#metrics_files[@]} == 0)); then
  fail "no METRICS_FILE given: cannot check the $name_count metric names the dashboard and the" \
    "alerts use against what the processes serve. Pass the /metrics text of a relay (with" \
    "--metrics-listen; a CDC relay serves the slot gauges), of outbox admin and of a consumer:" \
    "ops_files.sh REPO_DIR relay.txt admin.txt consumer.txt"
else
  for file in "${metrics_files[@]}"; do
    [[ -f "$file" ]] || fatal "METRICS_FILE $file does not exist"
  done
  if helper unknown "$work_dir/names.tsv" "${metrics_files[@]}" >"$work_dir/unknown.tsv" \
       2>"$work_dir/unknown.err"; then
    if [[ -s "$work_dir/unknown.tsv" ]]; then
      while IFS=$'\t' read -r source name; do
        fail "metric $name (used in $source) has no '# TYPE' line in any of: ${metrics_files[*]}"
      done <"$work_dir/unknown.tsv"
    else
      pass
    fi
  else
    fail "$(cat "$work_dir/unknown.err")"
  fi
fi

summary_and_exit
