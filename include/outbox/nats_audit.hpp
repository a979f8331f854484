#pragma once
// The delivery audit of a NATS JetStream stream (outbox/audit.hpp): over a window, the outbox rows
// against the stream's messages and a consumer's inbox. Part of outbox::nats.
//
// Every row of the window counts as the stream's: one stream takes every subject its relays'
// template renders (the sink's Nats-Expected-Stream refuses any other). The stream is read
// without consuming, from `since` less the slack by its messages' time (an ephemeral consumer
// that acknowledges nothing), up to its last message when the audit began.

#include <string>

#include "outbox/audit.hpp"

namespace outbox {

struct NatsAuditOptions : AuditWindow {
  std::string servers = "nats://127.0.0.1:4222";
  std::string stream = "OUTBOX";
  std::string credentials_file;
  std::string ca_file;
};

// Throws InvalidArgument for a window PostgreSQL cannot read or a stream that does not exist,
// DatabaseError, BrokerError (the stream could not be read within read_timeout).
AuditReport audit_nats_stream(const NatsAuditOptions& options);

}  // namespace outbox
