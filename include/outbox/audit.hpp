#pragma once
// The delivery audit: over a window of time, the outbox rows of one topic against what that topic
// holds and what a consumer's inbox applied. audit_topic is part of outbox::kafka; the NATS
// stream's audit (outbox/nats_audit.hpp) of outbox::nats gives the same report.
//
//   lost         committed, marked published, and not on the topic: the one thing outbox exists
//                to prevent (or the broker's retention dropped it: compare with its settings)
//   phantom      on the topic (produced in the window) with no row: announced, never committed
//                (or written by a table-less producer and never materialized: they have no row)
//   duplicated   on the topic more than once (at-least-once; an inbox makes them harmless)
//   not applied  published, and the consumer's inbox has no record of it (or has not yet)
//   pending      committed, not published yet: not a loss, the relays still owe it

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

namespace outbox {

// What the audit of every destination shares: the window, the rows, the inbox.
struct AuditWindow {
  std::string database_url;  // libpq connection string or URI; empty: the PG* variables
  SchemaName schema;
  std::string since;  // timestamptz text PostgreSQL reads: events that occurred from then ...
  std::string until;  // ... until then (empty: now)
  std::optional<std::string> consumer;  // an inbox consumer_name to check against
  // The destination is read from `since` less this, since a publish comes after its commit.
  std::chrono::milliseconds broker_slack{std::chrono::minutes(5)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};
};

struct AuditOptions : AuditWindow {
  std::string brokers;
  std::map<std::string, std::string> properties;  // extra librdkafka properties (security ...)
  std::string topic;
  std::string topic_template = "outbox.{aggregate_type}";  // the relays' (KafkaSinkOptions)
  // Read every partition from its first message instead of looking the window's start up by
  // timestamp (ListOffsets): for brokers that cannot answer it (librdkafka's mock cluster) or
  // message timestamps that cannot be trusted. Slower on a long topic.
  bool from_beginning = false;
};

struct AuditReport {
  std::int64_t rows = 0;       // outbox rows of the topic that occurred in the window
  std::int64_t published = 0;  // of those, marked published
  std::int64_t pending = 0;    // of those, not published yet
  std::int64_t skipped = 0;    // of those, skipped by an operator
  std::int64_t messages = 0;   // messages read from the topic
  std::int64_t foreign = 0;    // of those, without an outbox event_id header
  std::vector<EventId> lost;
  std::vector<EventId> phantom;
  std::vector<std::pair<EventId, std::int64_t>> duplicated;  // id, copies on the topic
  std::vector<EventId> not_applied;
  // With a consumer: whether its name has any inbox row at all. False is a misspelt name or a
  // consumer that never ran, and every published event then reads as not applied.
  bool consumer_known = false;
  bool table_less_registered = false;  // a table-less slot exists: phantoms may be those events
  [[nodiscard]] bool loss() const { return !lost.empty() || !phantom.empty(); }
};

// Reads the rows, the topic (from since - broker_slack to the end it had when the audit
// started) and the inbox. Throws InvalidArgument for a window PostgreSQL cannot read or a
// topic that does not exist, DatabaseError, BrokerError (the topic could not be read in
// read_timeout).
AuditReport audit_topic(const AuditOptions& options);

}  // namespace outbox
