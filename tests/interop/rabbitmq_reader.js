#!/usr/bin/env node
// A RabbitMQ reader built from a library outbox did not write, for tests/cli/rabbitmq_interop.sh:
// amqplib (the amqp-node project's AMQP 0-9-1 client, no rabbitmq-c) consumes a queue with manual
// acknowledgements and a prefetch of 10, and prints one JSON line per message, in the order it
// received them, then a summary.
//
// Usage: node rabbitmq_reader.js AMQP_URL QUEUE EXPECTED_COUNT TIMEOUT_S
// Each line: {routing_key, properties: {messageId, type, contentType, deliveryMode, appId,
// timestamp}, headers: {name: value}, data, redelivered}; header values that arrive as bytes are
// decoded as UTF-8, numbers stay numbers. It stops after EXPECTED_COUNT messages, when nothing
// arrives for 3 s, or after TIMEOUT_S. The summary: {summary: true, consumed, extra, timed_out}:
// extra counts the messages still in the queue after EXPECTED_COUNT (a repeat the reader did not
// print), timed_out that fewer than EXPECTED_COUNT came. Exits 1 on an error or a timeout.
"use strict";

const amqp = require("amqplib");

const quietMs = 3000;
const [url, queue, expectedArg, timeoutArg] = process.argv.slice(2);
const expected = Number(expectedArg);
const timeoutS = Number(timeoutArg);
if (!url || !queue || !(Number.isInteger(expected) && expected > 0) || !(timeoutS > 0)) {
  console.error("usage: node rabbitmq_reader.js AMQP_URL QUEUE EXPECTED_COUNT TIMEOUT_S");
  process.exit(2);
}

// A field table as JSON: bytes as UTF-8 text, {"!": "timestamp"} and the like as their value.
function plain(value) {
  if (Buffer.isBuffer(value)) return new TextDecoder("utf-8", { fatal: true }).decode(value);
  if (Array.isArray(value)) return value.map(plain);
  if (value !== null && typeof value === "object") {
    if ("!" in value && "value" in value) return plain(value.value);
    const out = {};
    for (const [name, v] of Object.entries(value)) out[name] = plain(v);
    return out;
  }
  return value;
}

function lineOf(msg) {
  const p = msg.properties;
  return {
    routing_key: msg.fields.routingKey,
    properties: { messageId: p.messageId ?? null, type: p.type ?? null,
                  contentType: p.contentType ?? null, deliveryMode: p.deliveryMode ?? null,
                  appId: p.appId ?? null, timestamp: p.timestamp ?? null },
    headers: plain(p.headers || {}),
    data: new TextDecoder("utf-8", { fatal: true }).decode(msg.content),
    redelivered: msg.fields.redelivered,
  };
}

async function main() {
  const connection = await amqp.connect(url);
  connection.on("error", (error) => {
    console.error(`connection error: ${error.message}`);
    process.exit(1);
  });
  const channel = await connection.createChannel();
  await channel.checkQueue(queue);  // a missing queue: an error here, not a quiet empty read
  await channel.prefetch(10);
  let consumed = 0;
  let extra = 0;
  let settle;
  const done = new Promise((resolve) => { settle = resolve; });
  let quiet = setTimeout(() => settle(), quietMs);
  const deadline = setTimeout(() => settle(), timeoutS * 1000);
  const { consumerTag } = await channel.consume(queue, (msg) => {
    if (msg === null) {  // cancelled by the broker: the queue was deleted
      settle();
      return;
    }
    if (consumed >= expected) {  // delivered before the cancel: left for the count below
      extra++;
      return;
    }
    console.log(JSON.stringify(lineOf(msg)));
    channel.ack(msg);
    consumed++;
    clearTimeout(quiet);
    if (consumed >= expected) settle();
    else quiet = setTimeout(() => settle(), quietMs);
  }, { noAck: false });
  await done;
  clearTimeout(quiet);
  clearTimeout(deadline);
  await channel.cancel(consumerTag);
  // Unacknowledged deliveries go back to the queue with the channel; then what is left is there.
  await channel.close();
  const check = await connection.createChannel();
  const { messageCount } = await check.checkQueue(queue);
  extra = Math.max(extra, messageCount);
  await connection.close();
  const timedOut = consumed < expected;
  console.log(JSON.stringify({ summary: true, consumed, extra, timed_out: timedOut }));
  if (timedOut) process.exit(1);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
