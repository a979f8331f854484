#!/usr/bin/env node
// A Redis Streams reader built from a library outbox did not write, for tests/cli/redis_interop.sh:
// ioredis (the Node.js client, no hiredis) finds the streams a stream template names and reads
// them two ways.
//
// Usage: node redis_reader.js range REDIS_URL TEMPLATE TIMEOUT_S
//        node redis_reader.js group REDIS_URL TEMPLATE TIMEOUT_S GROUP
// The streams: SCAN MATCH the template with {aggregate_type} and {partition} as "*", TYPE stream
// (the sink's "<stream>:outbox-dedup" sorted sets match the pattern too; they are counted, not
// read).
//
// range: XRANGE - + of every stream, one JSON line per entry in stream order: {stream, id,
// field_names (in entry order), fields: {name: value}}, values decoded as UTF-8 (an invalid byte
// is an error), then {summary: true, streams: {name: XLEN}, entries, other_keys: [names matching
// the pattern that are not streams]}.
//
// group: creates consumer group GROUP on every stream at 0 (an existing one is kept), reads with
// XREADGROUP ... STREAMS ... > in pages of 7 entries as consumer "reader", XACKs each page after
// printing it, until a read returns nothing; one JSON line per entry: {stream, id, event_id}.
// Then {summary: true, group, read, acked, pending: {stream: XPENDING count}, lag: {stream: the
// group's lag from XINFO GROUPS}}. Run again with the same GROUP it reads only what is new.
//
// Exits 1 on an error, or when not done within TIMEOUT_S.
"use strict";

const { Redis } = require("ioredis");

const [mode, url, template, timeoutArg, group] = process.argv.slice(2);
const timeoutS = Number(timeoutArg);
const usage = "usage: node redis_reader.js range REDIS_URL TEMPLATE TIMEOUT_S\n" +
              "       node redis_reader.js group REDIS_URL TEMPLATE TIMEOUT_S GROUP";
if (!url || !template || !(timeoutS > 0) || !(mode === "range" || (mode === "group" && group))) {
  console.error(usage);
  process.exit(2);
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const text = (buffer) => utf8.decode(buffer);

// The template as a SCAN pattern: the placeholders "*", glob characters of the rest escaped.
function patternOf(streamTemplate) {
  return streamTemplate.split(/\{aggregate_type\}|\{partition\}/)
    .map((part) => part.replace(/[\\*?[\]]/g, "\\$&")).join("*");
}

async function keysMatching(redis, pattern) {
  const streams = new Set();
  const all = new Set();
  for (const type of ["stream", null]) {
    let cursor = "0";
    do {
      const args = [cursor, "MATCH", pattern, "COUNT", 100];
      if (type) args.push("TYPE", type);
      const [next, keys] = await redis.scanBuffer(...args);
      cursor = text(next);
      for (const key of keys) (type ? streams : all).add(text(key));
    } while (cursor !== "0");
  }
  const others = [...all].filter((key) => !streams.has(key)).sort();
  return { streams: [...streams].sort(), others };
}

function entryFields(flat) {
  const names = [];
  const fields = {};
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const name = text(flat[i]);
    names.push(name);
    fields[name] = text(flat[i + 1]);
  }
  return { names, fields };
}

async function range(redis, streams, others) {
  const lengths = {};
  let entries = 0;
  for (const stream of streams) {
    for (const [id, flat] of await redis.xrangeBuffer(stream, "-", "+")) {
      const { names, fields } = entryFields(flat);
      console.log(JSON.stringify({ stream, id: text(id), field_names: names, fields }));
      entries++;
    }
    lengths[stream] = await redis.xlen(stream);
  }
  console.log(JSON.stringify({ summary: true, streams: lengths, entries, other_keys: others }));
}

async function readGroup(redis, streams) {
  for (const stream of streams) {
    try {
      await redis.xgroup("CREATE", stream, group, "0");
    } catch (error) {
      if (!String(error.message).startsWith("BUSYGROUP")) throw error;
    }
  }
  let read = 0;
  let acked = 0;
  if (streams.length > 0) {
    for (;;) {
      const reply = await redis.xreadgroupBuffer("GROUP", group, "reader", "COUNT", 7,
                                                 "STREAMS", ...streams, ...streams.map(() => ">"));
      if (!reply || reply.every(([, entries]) => entries.length === 0)) break;
      for (const [streamBuffer, entries] of reply) {
        const stream = text(streamBuffer);
        const ids = [];
        for (const [id, flat] of entries) {
          const { fields } = entryFields(flat);
          console.log(JSON.stringify({ stream, id: text(id), event_id: fields.event_id ?? null }));
          ids.push(text(id));
          read++;
        }
        if (ids.length > 0) acked += await redis.xack(stream, group, ...ids);
      }
    }
  }
  const pending = {};
  const lag = {};
  for (const stream of streams) {
    pending[stream] = Number((await redis.xpending(stream, group))[0]);
    for (const info of await redis.xinfo("GROUPS", stream)) {
      const fields = {};
      for (let i = 0; i + 1 < info.length; i += 2) fields[info[i]] = info[i + 1];
      if (fields.name === group) lag[stream] = fields.lag;
    }
  }
  console.log(JSON.stringify({ summary: true, group, read, acked, pending, lag }));
}

async function main() {
  // No reconnecting, no queueing while disconnected: a server that is not there is an error.
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0,
                                 retryStrategy: () => null, enableOfflineQueue: false });
  redis.on("error", (error) => console.error(`redis: ${error.message}`));
  await redis.connect();
  const { streams, others } = await keysMatching(redis, patternOf(template));
  if (mode === "range") await range(redis, streams, others);
  else await readGroup(redis, streams);
  await redis.quit();
}

setTimeout(() => {
  console.error(`redis_reader: not done within ${timeoutS} s`);
  process.exit(1);
}, timeoutS * 1000).unref();

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
