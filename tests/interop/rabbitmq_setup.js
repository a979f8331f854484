#!/usr/bin/env node
// The topology an operator declares before `outbox relay --sink rabbitmq` publishes, for
// tests/cli/rabbitmq_interop.sh, declared with amqplib (not by outbox): a durable topic exchange
// "shop"; a quorum queue "shop.all" with a single active consumer, bound with "#" (every event,
// in order, to one consumer); and a stream queue "shop.audit" bound with "#" (what
// `outbox audit --sink rabbitmq` reads back by time).
//
// Usage: node rabbitmq_setup.js AMQP_URL
"use strict";

const amqp = require("amqplib");

const [url] = process.argv.slice(2);
if (!url) {
  console.error("usage: node rabbitmq_setup.js AMQP_URL");
  process.exit(2);
}

async function main() {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  await channel.assertExchange("shop", "topic", { durable: true });
  await channel.assertQueue("shop.all", {
    durable: true,
    arguments: { "x-queue-type": "quorum", "x-single-active-consumer": true },
  });
  await channel.bindQueue("shop.all", "shop", "#");
  await channel.assertQueue("shop.audit", { durable: true, arguments: { "x-queue-type": "stream" } });
  await channel.bindQueue("shop.audit", "shop", "#");
  await connection.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
