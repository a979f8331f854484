#!/usr/bin/env node
// A NATS reader built from a library outbox did not write, for tests/cli/nats_interop.sh: nats.js
// (the NATS maintainers' JavaScript client, no nats.c) reads every message of a JetStream stream
// twice: by sequence through the stream API (what is stored), and through an ordered consumer
// (what a subscriber receives), and prints one JSON line per stored message, then a summary.
//
// Usage: node nats_reader.js SERVER STREAM TIMEOUT_S
// Each line: {seq, subject, headers: {name: value}, data}. The summary: {summary: true, stored,
// consumed, consumed_in_stream_order, timed_out}.
"use strict";

const { connect } = require("nats");

const [server, stream, timeoutArg] = process.argv.slice(2);
const timeoutS = Number(timeoutArg);
if (!server || !stream || !(timeoutS > 0)) {
  console.error("usage: node nats_reader.js SERVER STREAM TIMEOUT_S");
  process.exit(2);
}

function headersOf(msgHeaders) {
  const out = {};
  if (!msgHeaders) return out;
  for (const name of msgHeaders.keys()) out[name] = msgHeaders.get(name);
  return out;
}

async function main() {
  const timer = setTimeout(() => {
    console.log(JSON.stringify({ summary: true, timed_out: true }));
    process.exit(1);
  }, timeoutS * 1000);
  const nc = await connect({ servers: server });
  const jsm = await nc.jetstreamManager();
  const info = await jsm.streams.info(stream);
  const stored = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq });
    stored.push({ seq: m.seq, subject: m.subject, headers: headersOf(m.header),
                  data: new TextDecoder("utf-8", { fatal: true }).decode(m.data) });
  }
  for (const line of stored) console.log(JSON.stringify(line));
  // What a subscriber gets: an ordered consumer over the whole stream.
  const js = nc.jetstream();
  const consumer = await js.consumers.get(stream);
  const messages = await consumer.consume();
  const consumed = [];
  for await (const m of messages) {
    consumed.push(m.seq);
    if (consumed.length >= stored.length) break;
  }
  const inOrder = consumed.every((seq, i) => seq === stored[i].seq);
  console.log(JSON.stringify({ summary: true, stored: stored.length, consumed: consumed.length,
                               consumed_in_stream_order: inOrder, timed_out: false }));
  clearTimeout(timer);
  await nc.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
