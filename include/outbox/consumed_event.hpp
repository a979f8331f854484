#pragma once
// What every inbox consumer (Kafka, NATS, ...) hands its effect, and the counters every one keeps.

#include <cstdint>
#include <string>

#include "outbox/event.hpp"
#include "outbox/stats.hpp"

namespace outbox {

// A delivered message as the consumer sees it.
struct ConsumedEvent {
  EventId event_id;
  std::string aggregate_type;
  std::string aggregate_id;
  std::int64_t aggregate_sequence = 0;
  std::string event_type;
  std::int32_t schema_version = 0;
  std::string payload;
  std::string traceparent;     // the producer's W3C trace context (NewEvent::traceparent), or empty
  std::string topic;           // the Kafka topic, the NATS subject
  std::int32_t partition = 0;  // the Kafka partition; -1 where the broker has none
  std::int64_t offset = 0;     // the Kafka offset, the JetStream stream sequence
};

// The counters every inbox consumer keeps, under the same Prometheus names whatever the broker
// (outbox/stats.hpp says how a list reads); each consumer's list adds its own after them.
#define OUTBOX_CONSUMER_STATS(X)                                                                 \
  X(received, counter, always, "outbox_consumer_messages_received_total", "received {}",         \
    "Messages taken from the broker.")                                                           \
  X(applied, counter, always, "outbox_consumer_events_applied_total", "applied {}",              \
    "Events whose effect committed with their inbox row.")                                       \
  X(duplicates, counter, always, "outbox_consumer_duplicates_suppressed_total", "duplicates {}", \
    "Deliveries of events the inbox had already applied (no effect run).")                       \
  X(rejected, counter, when_set, "outbox_consumer_messages_rejected_total", "rejected {}",       \
    "Messages without a valid outbox event id (skipped, logged).")                               \
  X(failed_batches, counter, when_set, "outbox_consumer_failed_batches_total",                   \
    "failed batches {}", "Batches rolled back and rewound (effect or database failed).")         \
  X(reconnects, counter, when_set, "outbox_consumer_reconnects_total", "reconnects {}",          \
    "New PostgreSQL connections or broker clients after a failure.")                             \
  X(effect_failures, counter, when_set, "outbox_consumer_effect_failures_total",                 \
    "effect failures {}", "Batches rolled back because the effect threw.")                       \
  X(held, counter, when_set, "outbox_consumer_events_held_total", "held {}",                     \
    "Gap-aware inbox: events that came before a predecessor, kept in inbox_parked unapplied.")   \
  X(effects_parked, counter, when_set, "outbox_consumer_effects_parked_total",                   \
    "effects parked {}",                                                                         \
    "Gap-aware inbox: events parked because their effect failed park_failing_after times.")      \
  X(decisions_carried_out, counter, when_set, "outbox_consumer_decisions_carried_out_total",     \
    "decisions {}", "Gap-aware inbox: parked events released or skipped by an operator.")        \
  X(events_waiting, gauge, when_set, "outbox_consumer_events_waiting", "waiting {}",             \
    "Gap-aware inbox: held events waiting for a predecessor, not yet parked.")                   \
  X(events_parked, gauge, when_set, "outbox_consumer_events_parked", "parked {}",                \
    "Gap-aware inbox: events parked (waited past park_after, effect failed): their aggregates "  \
    "wait until the predecessor comes or an operator releases or skips them (outbox inbox).")

// The counter of brokers that deliver a message again after it was not acknowledged (NATS,
// RabbitMQ; a Kafka consumer rewinds instead), in their lists after OUTBOX_CONSUMER_STATS.
#define OUTBOX_CONSUMER_REDELIVERY_STATS(X)                                                   \
  X(redeliveries, counter, when_set, "outbox_consumer_redeliveries_total", "redeliveries {}", \
    "Messages the broker delivered more than once (not acknowledged in time or before a "     \
    "connection closed, or after a failed batch).")

}  // namespace outbox
