#pragma once
// The admin page: one self-contained HTML document (style, script and charts inline, no build
// step, nothing fetched from elsewhere), served at / by ObserveServer. It reads /api/overview
// 2 s after each answer: a headline (the server's verdict: healthy, degraded or stalled, and
// why), the server's last hour of published/s and pending (each on its own axis), the tables;
// and posts retry and skip to /api/quarantine/*, which need the listener's token (without one
// the buttons are disabled and say so). A listener that wants the token shows a form for it
// (never a prompt()); the tab keeps it (sessionStorage) and sends it as a bearer header.

namespace outbox::observe {

inline constexpr const char* kAdminPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>outbox admin</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;min-width:40em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#17702b;font-weight:600} .bad{color:#b3261e;font-weight:600}
#error{color:#b3261e} canvas{background:#fff;border:1px solid #ddd;display:block;margin-bottom:.3em}
button{margin-right:.3em} .muted{color:#777}
#verdict{padding:.6em .9em;margin:.4em 0 .6em;color:#fff;font-size:1.15em;font-weight:600;
 background:#777;max-width:56em}
#verdict.healthy{background:#17702b} #verdict.degraded{background:#9a5b00}
#verdict.stalled{background:#b3261e}
#login{display:none;margin:.5em 0;padding:.5em;background:#fff3cd;border:1px solid #e0c36b}
</style></head><body>
<h1>outbox admin</h1>
<div id="verdict" role="status">loading...</div>
<form id="login"><label>This listener needs its token (--admin-token-file):
 <input id="token" type="password" autocomplete="off" size="40"></label>
 <button type="submit">use it</button></form>
<div id="summary" class="muted"></div><div id="error"></div>
<h2>Last hour (kept by the server)</h2>
<canvas id="published" width="720" height="110" aria-label="events published per second"></canvas>
<canvas id="pending" width="720" height="110" aria-label="pending events"></canvas>
<table id="backlog"><thead><tr><th>aggregate type</th><th>pending</th><th>oldest pending age (s)</th><th>quarantined</th><th>in doubt</th></tr></thead><tbody></tbody></table>
<h2>Relays and consumers</h2>
<table id="parts"><thead><tr><th>part</th><th>state</th><th>detail</th></tr></thead><tbody></tbody></table>
<h2>Replication slots</h2>
<table id="slots"><thead><tr><th>slot</th><th>state</th><th>WAL held (MiB)</th><th></th></tr></thead><tbody></tbody></table>
<h2>Quarantine</h2>
<table id="quarantine"><thead><tr><th>event</th><th>aggregate</th><th>#</th><th>type</th><th>reason / last error</th><th>blocked</th><th></th></tr></thead><tbody></tbody></table>
<h2>In doubt</h2>
<p class="muted">Sent with no answer to a destination that cannot recognise a repeat: never sent again by itself. Settle with <code>outbox reconcile check --status-url ...</code> or <code>outbox reconcile published|retry|skip ID --reason ...</code>.</p>
<table id="in_doubt"><thead><tr><th>event</th><th>aggregate</th><th>#</th><th>type</th><th>since</th><th>what the sink saw</th><th>blocked</th></tr></thead><tbody></tbody></table>
<h2>Held by consumers</h2>
<p class="muted">Events gap-aware consumers took but do not apply yet: waiting for a predecessor, or parked (waited past park_after, the effect kept failing, a schema version the consumer does not know). Each holds back its own aggregate at that consumer. Decide with <code>outbox inbox release|skip ID --consumer NAME --reason ...</code>; the consumer carries it out.</p>
<table id="inbox_held"><thead><tr><th>consumer</th><th>event</th><th>aggregate</th><th>#</th><th>type</th><th>state</th><th>since</th><th>reason</th></tr></thead><tbody></tbody></table>
<h2>Slowest aggregates</h2>
<table id="slowest"><thead><tr><th>aggregate</th><th>pending</th><th>head waiting (s)</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
let hist = {t: [], pending: [], published_per_second: []};
let actionsEnabled = false;
function token() { return sessionStorage.getItem("outbox-token") || ""; }
document.getElementById("login").onsubmit = e => {
  e.preventDefault();
  const given = document.getElementById("token").value.trim();
  if (!given) return;
  sessionStorage.setItem("outbox-token", given);
  document.getElementById("login").style.display = "none";
  refresh();
};
async function call(path, body) {
  const headers = {"X-Outbox-Admin": "1"};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const init = body === undefined ? {headers} :
      {method: "POST", headers: Object.assign(headers, {"Content-Type": "application/json"}),
       body: JSON.stringify(body)};
  const response = await fetch(path, init);
  if (response.status === 401) {
    const refused = token() !== "";
    sessionStorage.removeItem("outbox-token");
    document.getElementById("login").style.display = "block";
    throw new Error(refused ? "the token was refused; give it again above"
                            : "give the listener's token above");
  }
  const text = await response.text();
  if (!response.ok) throw new Error(path + ": " + response.status + " " + text);
  return text ? JSON.parse(text) : {};
}
// As the CLI shows stored text (common/printable.hpp): a control character, a bidirectional
// override or a line separator would act instead of showing (U+202E turns the rest of a line
// around), so each is shown escaped, and a backslash doubled.
function printable(text) {
  return String(text).replace(/[\\\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, c => {
    if (c === "\\") return "\\\\";
    const code = c.charCodeAt(0);
    return code < 0x80 ? "\\x" + code.toString(16).padStart(2, "0")
                       : "\\u" + code.toString(16).padStart(4, "0");
  });
}
function cell(row, text, cls) {
  const td = row.insertCell(); td.textContent = printable(text); if (cls) td.className = cls;
  return td;
}
// A table is rebuilt only when its rows changed, so a button under the pointer stays put.
const shown = {};
function fill(id, rows, render) {
  const text = JSON.stringify(rows);
  if (shown[id] === text) return;
  shown[id] = text;
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const r of rows) render(body.insertRow(), r);
  if (rows.length === 0) { const tr = body.insertRow(); const td = cell(tr, "none", "muted");
    td.colSpan = document.querySelectorAll("#" + id + " th").length; }
}
// One series on its own canvas and axis, over the hour the server kept: a gap where a value is
// not known (null), a point for a lone sample, the axis's top value written in the corner.
function plot(id, label, values, color) {
  const c = document.getElementById(id), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const t = hist.t, known = values.filter(v => v !== null);
  const top = known.length ? Math.max(...known) : 0;
  const scale = top > 0 ? top : 1;  // all zero: a line along the bottom, the axis says 0
  const t1 = t.length ? t[t.length - 1] : 0, t0 = t1 - 3600;
  g.strokeStyle = color; g.fillStyle = color; g.beginPath();
  let drawing = false;
  values.forEach((v, i) => {
    if (v === null) { drawing = false; return; }
    const x = (t[i] - t0) / 3600 * (c.width - 10) + 5;
    const y = c.height - 5 - v / scale * (c.height - 22);
    drawing ? g.lineTo(x, y) : g.moveTo(x, y);
    drawing = true;
    // A value with no known neighbour would be a line of no length: a point instead.
    if ((i === 0 || values[i - 1] === null) && (i + 1 === values.length || values[i + 1] === null))
      g.fillRect(x - 2, y - 2, 5, 5);
  });
  g.stroke();
  const shown = top >= 100 ? Math.round(top) : Math.round(top * 10) / 10;
  g.fillText(label + " (axis top " + shown + ")", 8, 12);
  g.fillStyle = "#777";
  g.fillText("an hour ago", 8, c.height - 8);
  g.fillText("now", c.width - 28, c.height - 8);
}
function draw() {
  plot("published", "published per second", hist.published_per_second, "#17702b");
  plot("pending", "pending events", hist.pending, "#1a5fb4");
}
async function retry(id) {
  try { await call("/api/quarantine/retry", {event_id: id}); refresh(); }
  catch (e) { document.getElementById("error").textContent = printable(e.message); }
}
async function skip(id) {
  const reason = prompt("Skip event " + id + " without publishing it. Why? (goes into the audit)");
  if (!reason || !reason.trim()) return;
  try { await call("/api/quarantine/skip", {event_id: id, reason: reason.trim()}); refresh(); }
  catch (e) { document.getElementById("error").textContent = printable(e.message); }
}
async function refresh() {
  let o;
  try { o = await call("/api/overview"); document.getElementById("error").textContent = ""; }
  catch (e) { document.getElementById("error").textContent = printable(e.message); return; }
  const pending = o.backlog.reduce((a, b) => a + b.pending, 0);
  const age = o.backlog.reduce((a, b) => Math.max(a, b.oldest_pending_age), 0);
  const quarantined = o.backlog.reduce((a, b) => a + b.quarantined, 0);
  const inDoubt = o.backlog.reduce((a, b) => a + (b.in_doubt || 0), 0);
  const parkedAtConsumers = (o.inbox_held || []).filter(h => h.parked).length;
  const verdict = document.getElementById("verdict");
  verdict.className = o.verdict.state;
  verdict.textContent = o.verdict.state + ": " + printable(o.verdict.reason);
  hist = o.history;
  actionsEnabled = o.actions_enabled;
  document.getElementById("summary").textContent =
      "schema " + printable(o.schema) + ": " + pending + " pending, oldest " + age.toFixed(1) + " s, " +
      quarantined + " quarantined, " + inDoubt + " in doubt, " + parkedAtConsumers +
      " parked at consumers" + (o.backlog_ok ? "" : " (backlog query failing)") +
      (actionsEnabled ? "" : "; read-only: retry and skip need a token (start the listener with " +
       "--admin-token-file), or use `outbox quarantine`");
  fill("backlog", o.backlog, (tr, b) => { cell(tr, b.aggregate_type);
    cell(tr, b.pending, "num"); cell(tr, b.oldest_pending_age.toFixed(1), "num");
    cell(tr, b.quarantined, "num"); cell(tr, b.in_doubt || 0, "num"); });
  fill("parts", o.parts, (tr, p) => { cell(tr, p.part);
    cell(tr, p.state, p.state === "running" || p.state === "working" || p.state === "waiting for work" ? "ok" : "bad");
    cell(tr, p.detail || ""); });
  // A slot no relay streams keeps WAL until the disk fills: said as such.
  fill("slots", o.slots || [], (tr, s) => { tr.dataset.slot = s.name; cell(tr, s.name);
    cell(tr, s.streamed ? "streamed" : "not streamed", s.streamed ? "ok" : "bad");
    cell(tr, s.retained_bytes < 0 ? "its WAL is gone" : (s.retained_bytes / 1048576).toFixed(1), "num");
    cell(tr, s.streamed ? "" : "keeps WAL until a relay streams it again, or until `outbox cdc drop --slot " +
        s.name + "` drops it"); });
  fill("quarantine", o.quarantine.map(q => Object.assign({actions: actionsEnabled}, q)), (tr, q) => {
    tr.dataset.eventId = q.event_id;
    cell(tr, q.event_id); cell(tr, q.aggregate_type + " " + q.aggregate_id);
    cell(tr, q.aggregate_sequence, "num"); cell(tr, q.event_type);
    cell(tr, q.reason + (q.last_error ? ": " + q.last_error : "")); cell(tr, q.blocked_events, "num");
    const actions = tr.insertCell();
    const r = document.createElement("button"); r.textContent = "retry"; r.className = "retry";
    r.onclick = () => retry(q.event_id);
    const s = document.createElement("button"); s.textContent = "skip"; s.className = "skip";
    s.onclick = () => skip(q.event_id);
    for (const b of [r, s]) {
      b.disabled = !actionsEnabled;
      if (!actionsEnabled) b.title = "needs a token: start the listener with --admin-token-file";
    }
    actions.append(r, s); });
  fill("in_doubt", o.in_doubt || [], (tr, d) => {
    tr.dataset.eventId = d.event_id;
    cell(tr, d.event_id); cell(tr, d.aggregate_type + " " + d.aggregate_id);
    cell(tr, d.aggregate_sequence, "num"); cell(tr, d.event_type); cell(tr, d.in_doubt_at);
    cell(tr, d.reason); cell(tr, d.blocked_events, "num"); });
  fill("inbox_held", o.inbox_held || [], (tr, h) => {
    tr.dataset.eventId = h.event_id;
    cell(tr, h.consumer); cell(tr, h.event_id); cell(tr, h.aggregate_type + " " + h.aggregate_id);
    cell(tr, h.aggregate_sequence, "num"); cell(tr, h.event_type + " v" + h.schema_version);
    cell(tr, (h.parked ? "parked (" + h.kind + ")" : h.kind) +
             (h.decision ? ", " + h.decision + " pending" : ""));
    cell(tr, h.held_at); cell(tr, h.reason); });
  fill("slowest", o.slowest, (tr, a) => { cell(tr, a.aggregate_type + " " + a.aggregate_id);
    cell(tr, a.pending, "num"); cell(tr, a.waiting_age.toFixed(1), "num"); });
  draw();
}
// The next refresh only after this one: a slow database never piles requests up.
async function loop() { await refresh(); setTimeout(loop, 2000); }
loop();
</script></body></html>
)HTML";

}  // namespace outbox::observe
