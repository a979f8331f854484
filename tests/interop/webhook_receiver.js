#!/usr/bin/env node
// A webhook endpoint built from libraries outbox did not write, for tests/cli/http_interop.sh:
// the Standard Webhooks reference library (standardwebhooks) checks each request's signature and
// the CloudEvents SDK (cloudevents) reads it as a binary-mode CloudEvent. Answers 200 when every
// check passes, else 400 with the reason, and appends one JSON line per request to RESULTS_FILE.
//
// Usage: node webhook_receiver.js RESULTS_FILE SECRETS_FILE
// SECRETS_FILE: the relay's --http-signing-secret-file format, one "whsec_<base64>" per line
// (blank lines and '#' comments skipped). The first secret must verify every request. With two or
// more, webhook-signature must carry one signature per secret, and each signature alone must
// verify under its own secret (rotation: a receiver holding either secret accepts the request).
//
// Stdout: "listening PORT" first, then "tamper check: ..." once the library has shown, on a
// message it signed itself, that it rejects a changed body. Each request is checked that way too:
// the real body with one byte added must fail verification.
"use strict";

const fs = require("node:fs");
const http = require("node:http");
const util = require("node:util");
const { Webhook } = require("standardwebhooks");
const { HTTP, CloudEvent } = require("cloudevents");

const [resultsFile, secretsFile] = process.argv.slice(2);
if (!resultsFile || !secretsFile) {
  console.error("usage: node webhook_receiver.js RESULTS_FILE SECRETS_FILE");
  process.exit(2);
}
const secrets = fs
  .readFileSync(secretsFile, "utf8")
  .split("\n")
  .map((line) => line.trim())
  .filter((line) => line !== "" && !line.startsWith("#"));
if (secrets.length === 0) {
  console.error(`webhook_receiver: ${secretsFile} holds no secret`);
  process.exit(2);
}
// The library takes the "whsec_" form and strips the prefix itself (Webhook.prefix).
const hooks = secrets.map((secret) => new Webhook(secret));

// Throws when `fn` does not throw: a verification that cannot fail proves nothing.
function mustThrow(what, fn) {
  try {
    fn();
  } catch (error) {
    return `${error.name}: ${error.message}`;
  }
  throw new Error(`${what} was accepted`);
}

// The library's own round trip, before any request: what it signed verifies, and the same
// message with a changed body does not.
let tamperLine;
try {
  const id = "msg_selfcheck";
  const now = new Date();
  const body = '{"total":42}';
  const headers = {
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
    "webhook-signature": hooks[0].sign(id, now, body),
  };
  hooks[0].verify(body, headers);
  const why = mustThrow("a tampered body", () => hooks[0].verify('{"total":43}', headers));
  tamperLine = `tamper check: verify rejected a tampered body (${why})`;
} catch (error) {
  console.error(`webhook_receiver: tamper check failed: ${error.message}`);
  process.exit(1);
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

// Every check on one request; returns the facts recorded, throws with the reason on a failure.
function check(req, raw, record) {
  const headers = req.headers;  // node lower-cases the names
  if (req.method !== "POST") throw new Error(`method ${req.method}, expected POST`);
  if (headers["content-type"] !== "application/json") {
    throw new Error(`content-type ${headers["content-type"]}, expected application/json`);
  }

  // Standard Webhooks: the first secret, then each signature alone under its own secret.
  try {
    hooks[0].verify(raw, headers);
  } catch (error) {
    throw new Error(`standardwebhooks verify: ${error.name}: ${error.message}`);
  }
  const signatures = String(headers["webhook-signature"]).split(" ");
  record.signatures = signatures.length;
  if (hooks.length > 1) {
    if (signatures.length !== hooks.length) {
      throw new Error(`${signatures.length} signatures for ${hooks.length} secrets`);
    }
    hooks.forEach((hook, i) => {
      try {
        hook.verify(raw, { ...headers, "webhook-signature": signatures[i] });
      } catch (error) {
        throw new Error(`signature ${i + 1} under secret ${i + 1}: ${error.message}`);
      }
    });
  }
  record.verified_by = hooks.length;
  mustThrow("the body with a byte added", () =>
    hooks[0].verify(Buffer.concat([raw, Buffer.from(" ")]), headers));
  record.tamper_rejected = true;

  // CloudEvents, binary mode. toEvent builds the event without validating it (strict = false),
  // so the strict constructor runs the SDK's checks: extension names, value types, the schema.
  const body = raw.toString("utf8");
  const parsed = HTTP.toEvent({ headers, body });
  if (Array.isArray(parsed)) throw new Error("cloudevents read a batch");
  let event;
  try {
    event = new CloudEvent({ ...parsed }, true);
  } catch (error) {
    throw new Error(`cloudevents validation: ${error.message}`);
  }
  Object.assign(record, {
    id: event.id,
    type: event.type,
    source: event.source,
    subject: event.subject,
    aggregatetype: event.aggregatetype,
    sequence: event.aggregatesequence,
    partitionkey: event.partitionkey,
    schemaversion: event.schemaversion,
    time: headers["ce-time"],
    traceparent: headers.traceparent ?? null,
    tracestate: headers.tracestate ?? null,
    tenant: headers["x-tenant"] ?? null,
    leaked: Object.keys(headers).filter((name) => name === "tenant"),
    path: req.url,
  });
  if (event.specversion !== "1.0") throw new Error(`specversion ${event.specversion}`);
  if (event.datacontenttype !== "application/json") {
    throw new Error(`datacontenttype ${event.datacontenttype}`);
  }
  if (!(event.id === headers["idempotency-key"] && event.id === headers["webhook-id"])) {
    throw new Error(`ce id ${event.id}, Idempotency-Key ${headers["idempotency-key"]}, ` +
      `webhook-id ${headers["webhook-id"]}: not one id`);
  }
  if (!util.isDeepStrictEqual(event.data, JSON.parse(body))) {
    throw new Error(`data ${JSON.stringify(event.data)} is not the body ${body}`);
  }
  // The SDK turns an unreadable ce-time into the current time without a word, so the header
  // itself is checked, then what the SDK made of it (milliseconds: a JavaScript Date).
  const time = headers["ce-time"];
  if (!RFC3339.test(time ?? "") || Number.isNaN(Date.parse(time))) {
    throw new Error(`ce-time ${time} is not RFC 3339`);
  }
  if (event.time !== new Date(time).toISOString()) {
    throw new Error(`the SDK's time ${event.time} is not ce-time ${time}`);
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const record = { ok: false, id: sentId(req), error: null };
    try {
      check(req, Buffer.concat(chunks), record);
      record.ok = true;
    } catch (error) {
      record.error = error.message;
    }
    fs.appendFileSync(resultsFile, JSON.stringify(record) + "\n");
    res.writeHead(record.ok ? 200 : 400, { "Content-Type": "text/plain" });
    res.end(record.ok ? "ok\n" : `${record.error}\n`);
  });
});

// The id as sent, for a request that fails before the CloudEvents SDK reads it.
function sentId(req) {
  return req.headers["webhook-id"] ?? req.headers["ce-id"] ?? null;
}

server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
  console.log(tamperLine);
});
process.on("SIGTERM", () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
