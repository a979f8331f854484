#pragma once
// The NATS JetStream sink: the relay publishes each event to a JetStream stream (nats.c) and
// takes the stream's PubAck as the acknowledgement. Part of the outbox::nats target.
//
// What a PubAck means: the stream's leader stored the message (and, for a replicated stream, a
// quorum of its replicas did). nats-server writes its file store at once but syncs it to disk on
// its own schedule (every 2 minutes by default): a power loss of a single server within that time
// can lose acknowledged messages; a stream with 3 replicas survives it. A memory-storage stream
// is refused unless asked for (allow_memory_storage): a restart empties it.
//
// Every message carries Nats-Msg-Id = the event id: JetStream drops a second message with the
// same id inside the stream's duplicate window and answers with a PubAck marked duplicate, which
// counts as published (and is counted: nats_duplicates). The window must outlast the longest
// time between two sends of one event (longest_retry), or a resend after it is stored twice;
// the sink refuses a stream whose window is shorter. Nats-Expected-Stream = the stream: a subject
// that some other stream takes is a failure, never a publish elsewhere.
//
// Subjects: the template may hold {aggregate_type}, {event_type} and {partition}, never the
// aggregate id. An aggregate id is any text (dots, spaces, "*", ">" are all legal in one), a
// subject token is not, and escaping would give consumers a second encoding to undo; a subject
// per aggregate also costs the server memory per subject for ever. {partition} is
// aggregate_partition(aggregate_id, partitions) (outbox/partition.hpp: Kafka's murmur2), so the
// partitions of a subject split the aggregates among consumers as Kafka partitions do. A type
// that renders an illegal subject (empty token, whitespace, a wildcard) is a permanent failure:
// the event is quarantined, others flow.
//
// Headers: event_id, event_type, aggregate_type, aggregate_sequence, schema_version, the event's
// own string headers (not those names, and none beginning "Nats-": a writer of the table must not
// steer the server), and with a CloudEvents source the NATS binding's binary mode (ce-specversion,
// ce-id, ce-source, ce-type, ce-subject, ce-time and outbox's extensions, content-type).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox {

struct NatsSinkOptions {
  // Server URLs, comma separated: "nats://host:4222,nats://other:4222" (tls:// for TLS; a user
  // and password may be in the URL).
  std::string servers = "nats://127.0.0.1:4222";
  std::string stream = "OUTBOX";
  std::string subject_template = "outbox.{aggregate_type}.{partition}";
  std::uint32_t partitions = 16;  // for {partition}: 1 to 4096
  // Create the stream when it does not exist: file storage, subjects from the template (each
  // placeholder as "*"), a duplicate window of the longer of 2 minutes and longest_retry + 1 min.
  bool create_stream = false;
  bool allow_memory_storage = false;
  std::chrono::milliseconds ack_timeout{5000};  // no PubAck by then: an unknown outcome
  // The relay's lease: a send must end before it. 0: not checked.
  std::chrono::milliseconds max_ack_timeout{0};
  // The longest time between two sends of one event (the relay's longest backoff or its lease,
  // and the ack timeout): the stream's duplicate window must be at least this. 0: not checked.
  std::chrono::milliseconds longest_retry{0};
  std::chrono::milliseconds connect_timeout{2000};
  std::string credentials_file;      // a .creds file (JWT and NKey seed); empty: none
  std::string ca_file;               // PEM bundle for tls:// servers; empty: the system's
  std::string cloudevents_source{};  // non-empty: the CloudEvents NATS binding's ce- headers
};

// Throws ConfigError for an unusable template, partition count, timeout or server list. Does
// not wait for the server: the stream is checked on the first send after each (re)connect; a
// stream that is missing (without create_stream), has a duplicate window below longest_retry, or
// keeps messages in memory (without allow_memory_storage) stops the relay with a ConfigError that
// says what to change.
std::unique_ptr<Sink> make_nats_sink(const NatsSinkOptions& options);

// The subject `event` goes to (exposed for tests and tools).
std::string render_nats_subject(const NatsSinkOptions& options, const Event& event);

}  // namespace outbox
