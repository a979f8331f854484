#pragma once
// The admin page: one self-contained HTML document (style, script and chart inline, no build
// step, nothing fetched from elsewhere), served at / by ObserveServer. It reads /api/overview
// 2 s after each answer and posts retry and skip to /api/quarantine/*, which need the listener's
// token (without one the page is read-only). It asks for the token once and keeps it for the tab
// (sessionStorage), sending it as a bearer header.

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
#error{color:#b3261e} canvas{background:#fff;border:1px solid #ddd}
button{margin-right:.3em} .muted{color:#777}
</style></head><body>
<h1>outbox admin</h1>
<div id="summary" class="muted">loading...</div><div id="error"></div>
<h2>Backlog (last 10 minutes)</h2>
<canvas id="chart" width="720" height="160" aria-label="pending events and oldest pending age"></canvas>
<div class="muted">blue: pending events; red: oldest pending age (s)</div>
<table id="backlog"><thead><tr><th>aggregate type</th><th>pending</th><th>oldest pending age (s)</th><th>quarantined</th></tr></thead><tbody></tbody></table>
<h2>Relays and consumers</h2>
<table id="parts"><thead><tr><th>part</th><th>state</th><th>detail</th></tr></thead><tbody></tbody></table>
<h2>Replication slots</h2>
<table id="slots"><thead><tr><th>slot</th><th>state</th><th>WAL held (MiB)</th><th></th></tr></thead><tbody></tbody></table>
<h2>Quarantine</h2>
<table id="quarantine"><thead><tr><th>event</th><th>aggregate</th><th>#</th><th>type</th><th>reason / last error</th><th>blocked</th><th></th></tr></thead><tbody></tbody></table>
<h2>Slowest aggregates</h2>
<table id="slowest"><thead><tr><th>aggregate</th><th>pending</th><th>head waiting (s)</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const samples = [];
function token() { return sessionStorage.getItem("outbox-token") || ""; }
async function call(path, body) {
  const headers = {"X-Outbox-Admin": "1"};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const init = body === undefined ? {headers} :
      {method: "POST", headers: Object.assign(headers, {"Content-Type": "application/json"}),
       body: JSON.stringify(body)};
  const response = await fetch(path, init);
  if (response.status === 401) {
    const given = prompt("This outbox admin needs its token (--admin-token-file):");
    if (given) { sessionStorage.setItem("outbox-token", given.trim()); return call(path, body); }
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
function draw() {
  const c = document.getElementById("chart"), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  if (samples.length === 0) return;
  const t0 = samples[0].t, t1 = samples[samples.length - 1].t || 1;
  for (const [key, color] of [["pending", "#1a5fb4"], ["age", "#c01c28"]]) {
    const max = Math.max(1, ...samples.map(s => s[key]));
    g.strokeStyle = color; g.beginPath();
    samples.forEach((s, i) => {
      const x = (s.t - t0) / Math.max(1, t1 - t0) * (c.width - 10) + 5;
      const y = c.height - 5 - s[key] / max * (c.height - 10);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
      if (samples.length === 1) { g.fillStyle = color; g.fillRect(x - 2, y - 2, 5, 5); }  // a point
    });
    g.stroke(); g.fillStyle = color; g.fillText(key + " max " + Math.round(max), 8, key === "pending" ? 14 : 28);
  }
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
  samples.push({t: Date.now() / 1000, pending, age});
  while (samples.length > 300) samples.shift();
  document.getElementById("summary").textContent =
      "schema " + printable(o.schema) + ": " + pending + " pending, oldest " + age.toFixed(1) + " s, " +
      o.quarantine.length + " quarantined" + (o.backlog_ok ? "" : " (backlog query failing)");
  fill("backlog", o.backlog, (tr, b) => { cell(tr, b.aggregate_type);
    cell(tr, b.pending, "num"); cell(tr, b.oldest_pending_age.toFixed(1), "num");
    cell(tr, b.quarantined, "num"); });
  fill("parts", o.parts, (tr, p) => { cell(tr, p.part);
    cell(tr, p.state, p.state === "running" || p.state === "working" || p.state === "waiting for work" ? "ok" : "bad");
    cell(tr, p.detail || ""); });
  // A slot no relay streams keeps WAL until the disk fills: said as such.
  fill("slots", o.slots || [], (tr, s) => { tr.dataset.slot = s.name; cell(tr, s.name);
    cell(tr, s.streamed ? "streamed" : "not streamed", s.streamed ? "ok" : "bad");
    cell(tr, s.retained_bytes < 0 ? "its WAL is gone" : (s.retained_bytes / 1048576).toFixed(1), "num");
    cell(tr, s.streamed ? "" : "keeps WAL until a relay streams it again, or until `outbox cdc drop --slot " +
        s.name + "` drops it"); });
  fill("quarantine", o.quarantine, (tr, q) => {
    tr.dataset.eventId = q.event_id;
    cell(tr, q.event_id); cell(tr, q.aggregate_type + " " + q.aggregate_id);
    cell(tr, q.aggregate_sequence, "num"); cell(tr, q.event_type);
    cell(tr, q.reason + (q.last_error ? ": " + q.last_error : "")); cell(tr, q.blocked_events, "num");
    const actions = tr.insertCell();
    const r = document.createElement("button"); r.textContent = "retry"; r.className = "retry";
    r.onclick = () => retry(q.event_id);
    const s = document.createElement("button"); s.textContent = "skip"; s.className = "skip";
    s.onclick = () => skip(q.event_id);
    actions.append(r, s); });
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
