#!/usr/bin/env node
// A Kafka consumer built from libraries outbox did not write, for tests/cli/kafka_interop.sh:
// kafkajs (a Kafka client in JavaScript, no librdkafka) reads the topics the relay wrote, and the
// CloudEvents SDK (cloudevents) reads each message as a binary-mode CloudEvent of the Kafka
// protocol binding, validated strictly. Prints one JSON line per message, then one summary line.
//
// Usage: node kafka_reader.js BROKERS COUNT TIMEOUT_S TOPIC...
// BROKERS: bootstrap servers, host:port,... (`outbox-dev kafka-mock`'s first line). Reads every
// TOPIC from the beginning, every partition up to the end it had when the reader started, until
// COUNT distinct events were seen (the ce_id, else outbox's event_id header); at the ends with
// fewer, until no message came for 3 s; and at most TIMEOUT_S seconds (then timed_out).
//
// Each message line: {topic, partition, offset, key, ce_id, event_id, ok, cloudevent, error, ...}.
// Each keyed message must sit in the partition the Java client's partitioner gives its key.
// `cloudevent` is the SDK's Kafka.isEvent (false without a ce_id header: toEvent then throws "No
// CloudEvent detected"); `ok` is true only when every check below passed. Once the SDK's strict
// validation passed, the line also holds what it read: id, type, source, specversion, subject,
// time (the raw ce_time), sdk_time, datacontenttype, aggregatetype, aggregatesequence,
// schemaversion, partitionkey, extensions, data. Also: header_names (in the message's order),
// sequence_header (outbox's aggregate_sequence) and kafka_timestamp (the message's, in ms).
// The summary line: {summary: true, messages, wanted (COUNT), distinct, ok, failed,
// not_cloudevents, duplicates, keys, order_ok, order_problems, timed_out}. order_ok: within each
// (topic, key), in offset order, ce_aggregatesequence (outbox's aggregate_sequence for a message
// without ce_ headers) starts at 1 and goes up by one, and the key lives in one partition.
"use strict";

const util = require("node:util");
const { Kafka: KafkaClient, Partitioners, logLevel } = require("kafkajs");
const { Kafka, CloudEvent } = require("cloudevents");

const [brokersArg, countArg, timeoutArg, ...topics] = process.argv.slice(2);
const count = Number(countArg);
const timeoutS = Number(timeoutArg);
if (!brokersArg || !Number.isInteger(count) || !(timeoutS > 0) || topics.length === 0) {
  console.error("usage: node kafka_reader.js BROKERS COUNT TIMEOUT_S TOPIC...");
  process.exit(2);
}

const GRACE_MS = 3000;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
// What outbox writes: UTC, microseconds.
const OUTBOX_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
const CORE = new Set(["id", "time", "type", "source", "specversion", "datacontenttype", "subject",
  "datacontentencoding", "dataschema", "data_base64", "schemaurl", "data"]);
const utf8 = new TextDecoder("utf-8", { fatal: true });

// Bytes to a string, refusing what is not UTF-8 (TextDecoder would otherwise put U+FFFD).
function text(what, bytes) {
  if (bytes === null || bytes === undefined) return bytes;
  try {
    return utf8.decode(bytes);
  } catch {
    throw new Error(`${what} is not UTF-8: ${Buffer.from(bytes).toString("hex")}`);
  }
}

// kafkajs hands header values as Buffers, and a name sent twice as an array of them.
function stringHeaders(headers, record) {
  const out = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (Array.isArray(value)) {
      throw new Error(`header ${name} appears ${value.length} times`);
    }
    out[name] = text(`header ${name}`, value);
  }
  record.header_names = Object.keys(out);
  return out;
}

// The partition the Java client's partitioner (murmur2 of the key's bytes; kafkajs's default since
// 2.0) picks for a key: where a producer in another language puts the same aggregate's events.
const javaPartitioner = Partitioners.DefaultPartitioner();
const partitionCounts = new Map();  // topic -> its number of partitions
function javaPartition(topic, key) {
  const partitionMetadata = Array.from({ length: partitionCounts.get(topic) },
    (_, partitionId) => ({ partitionId, leader: 0 }));
  return javaPartitioner({ topic, partitionMetadata, message: { key } });
}

// Every check on one message; fills `record`, throws with the reason on a failure.
function check(message, record) {
  const key = text("the key", message.key);
  record.key = key;
  const headers = stringHeaders(message.headers, record);
  const value = text("the value", message.value);
  record.ce_id = headers.ce_id ?? null;
  record.event_id = headers.event_id ?? null;
  record.sequence_header = headers.aggregate_sequence ?? null;
  record.kafka_timestamp = message.timestamp;

  // The Kafka binding, binary mode: what a consumer hands the SDK. The key as a string: the SDK
  // makes it the partitionkey as given, and its strict check takes a Buffer there too (binary).
  const kafkaMessage = { headers, key, value: message.value, timestamp: message.timestamp };
  record.cloudevent = Boolean(Kafka.isEvent(kafkaMessage));  // undefined, not false, for "no"
  let parsed;
  try {
    parsed = Kafka.toEvent(kafkaMessage);
  } catch (error) {
    throw new Error(`cloudevents toEvent: ${error.constructor.name}: ${error.message}`);
  }
  if (Array.isArray(parsed)) throw new Error("cloudevents read a batch");
  // toEvent builds the event without validating it (strict = false), so the strict constructor
  // runs the SDK's checks: extension names, value types, the JSON schema of CloudEvents 1.0.
  let event;
  try {
    event = new CloudEvent({ ...parsed }, true);
  } catch (error) {
    throw new Error(`cloudevents validation: ${error.constructor.name}: ${error.message}`);
  }
  Object.assign(record, {
    id: event.id,
    type: event.type,
    source: event.source,
    specversion: event.specversion,
    subject: event.subject,
    time: headers.ce_time ?? null,
    sdk_time: event.time,
    datacontenttype: event.datacontenttype,
    aggregatetype: event.aggregatetype,
    aggregatesequence: event.aggregatesequence,
    schemaversion: event.schemaversion,
    partitionkey: event.partitionkey,
    extensions: Object.keys(event).filter((name) => !CORE.has(name)).sort(),
    data: event.data,
  });

  // The SDK fills a missing id (a UUIDv4), time (now) and specversion (1.0) without a word:
  // the headers themselves must carry the required attributes.
  for (const name of ["ce_specversion", "ce_id", "ce_source", "ce_type"]) {
    if (!headers[name]) throw new Error(`no ${name} header`);
  }
  if (headers.ce_specversion !== "1.0") throw new Error(`ce_specversion ${headers.ce_specversion}`);
  if (event.datacontenttype !== "application/json") {
    throw new Error(`datacontenttype ${event.datacontenttype}, expected application/json`);
  }
  const same = (what, a, b) => {
    if (a !== b) throw new Error(`${what}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
  };
  same("ce id vs the event_id header", event.id, headers.event_id);
  same("ce type vs the event_type header", event.type, headers.event_type);
  same("ce aggregatetype vs the aggregate_type header", event.aggregatetype,
    headers.aggregate_type);
  same("ce aggregatesequence vs the aggregate_sequence header", event.aggregatesequence,
    headers.aggregate_sequence);
  same("ce schemaversion vs the schema_version header", event.schemaversion,
    headers.schema_version);
  same("the key vs ce subject", key, event.subject);
  same("the key vs the SDK's partitionkey", key, event.partitionkey);
  if (!/^[1-9][0-9]*$/.test(event.aggregatesequence ?? "")) {
    throw new Error(`ce aggregatesequence ${event.aggregatesequence} is not a positive integer`);
  }
  let body;
  try {
    body = JSON.parse(value);
  } catch (error) {
    throw new Error(`the value is not JSON: ${error.message}`);
  }
  if (!util.isDeepStrictEqual(event.data, body)) {
    throw new Error(`data ${JSON.stringify(event.data)} is not the value ${value}`);
  }
  // The SDK turns ce_time into a JavaScript Date's ISO string (milliseconds), so the header
  // itself is checked, then what the SDK made of it.
  const time = headers.ce_time;
  if (!RFC3339.test(time ?? "") || Number.isNaN(Date.parse(time))) {
    throw new Error(`ce_time ${time} is not RFC 3339`);
  }
  if (!OUTBOX_TIME.test(time)) throw new Error(`ce_time ${time} is not UTC with microseconds`);
  if (event.time !== new Date(time).toISOString()) {
    throw new Error(`the SDK's time ${event.time} is not ce_time ${time}`);
  }
}

const kafka = new KafkaClient({
  clientId: "outbox-kafka-interop",
  brokers: brokersArg.split(","),
  logLevel: logLevel.WARN,
  // kafkajs's own logger puts info on stdout; this one writes all to stderr: stdout is JSON lines.
  logCreator: () => ({ namespace, label, log: { message, ...extra } }) =>
    console.error(`kafkajs ${label} [${namespace}] ${message} ${JSON.stringify(extra)}`),
  connectionTimeout: 3000,
  retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 5 },
});
const admin = kafka.admin();
const consumer = kafka.consumer({
  groupId: `outbox-kafka-interop-${process.pid}-${Date.now()}`,
  allowAutoTopicCreation: false,
  maxWaitTimeInMs: 200,
  retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 5 },
});

const records = [];
const seen = new Set();
let duplicates = 0;
const ends = new Map();      // "topic/partition" -> the high-water mark when the reader started
const reached = new Map();   // "topic/partition" -> the next offset to read

// Every partition read up to the end it had when the reader started.
function atEnds() {
  for (const [tp, end] of ends) {
    if ((reached.get(tp) ?? 0n) < end) return false;
  }
  return true;
}

// Per-aggregate order as this client sees it: each (topic, key) in one partition, its sequence
// 1, 2, 3... in offset order.
function orderCheck() {
  const byKey = new Map();
  for (const r of records) {
    const k = JSON.stringify([r.topic, r.key]);
    if (!byKey.has(k)) byKey.set(k, []);
    byKey.get(k).push(r);
  }
  const problems = [];
  for (const [k, list] of byKey) {
    const partitions = new Set(list.map((r) => r.partition));
    if (partitions.size !== 1) problems.push(`${k}: in partitions ${[...partitions]}`);
    const offset = (r) => BigInt(r.offset);
    list.sort((a, b) => a.partition - b.partition || (offset(a) < offset(b) ? -1 : 1));
    let expected = 1;
    for (const r of list) {
      const sequence = r.aggregatesequence ?? r.sequence_header;
      if (sequence !== String(expected)) {
        const at = `${r.partition}@${r.offset}`;
        problems.push(`${k}: ${at} has sequence ${sequence}, expected ${expected}`);
        break;
      }
      expected += 1;
    }
  }
  return { keys: byKey.size, problems };
}

async function main() {
  await admin.connect();
  for (const topic of topics) {
    const offsets = await admin.fetchTopicOffsets(topic);
    for (const { partition, high } of offsets) ends.set(`${topic}/${partition}`, BigInt(high));
    partitionCounts.set(topic, offsets.length);
  }
  await admin.disconnect();

  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(() => finish(true), timeoutS * 1000);
  // Done at the ends with COUNT distinct events. At the ends with fewer, a message may still be
  // on its way: the reader stops once none came for GRACE_MS (not a timeout: the count tells).
  let grace;
  const progress = () => {
    if (!atEnds()) return;
    if (seen.size >= count) finish(false);
    clearTimeout(grace);
    grace = setTimeout(() => finish(false), GRACE_MS);
  };
  await consumer.connect();
  await consumer.subscribe({ topics, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      const record = { topic, partition, offset: message.offset, key: null, ce_id: null,
        event_id: null, ok: false, cloudevent: null, error: null };
      const problems = [];
      try {
        check(message, record);
      } catch (error) {
        problems.push(error.message);
      }
      if (message.key !== null) {
        const java = javaPartition(topic, message.key);
        if (java !== partition) {
          problems.push(`in partition ${partition}; the Java client's partitioner gives ${java}`);
        }
      }
      record.ok = problems.length === 0;
      record.error = record.ok ? null : problems.join("; ");
      const identity = record.ce_id ?? record.event_id ?? `${topic}/${partition}@${message.offset}`;
      if (seen.has(identity)) duplicates += 1;
      seen.add(identity);
      records.push(record);
      reached.set(`${topic}/${partition}`, BigInt(message.offset) + 1n);
      console.log(JSON.stringify(record));
      progress();
    },
  });
  progress();  // nothing to read at all
  const timedOut = await finished;
  clearTimeout(timer);
  clearTimeout(grace);
  await consumer.disconnect();

  const order = orderCheck();
  console.log(JSON.stringify({
    summary: true,
    messages: records.length,
    wanted: count,
    distinct: seen.size,
    ok: records.filter((r) => r.ok).length,
    failed: records.filter((r) => !r.ok).length,
    not_cloudevents: records.filter((r) => r.cloudevent === false).length,
    duplicates,
    keys: order.keys,
    order_ok: order.problems.length === 0,
    order_problems: order.problems.slice(0, 10),
    timed_out: timedOut,
  }));
}

main().catch((error) => {
  console.error(`kafka_reader: ${error.name}: ${error.message}`);
  process.exit(1);
});
