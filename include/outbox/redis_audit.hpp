#pragma once
// The delivery audit of Redis Streams (outbox/audit.hpp): over a window, the outbox rows against
// the entries of every stream the sink's template names, and a consumer's inbox. Part of
// outbox::redis.
//
// The streams are found by their names (SCAN with the template's pattern, streams only) and read
// by range (XRANGE from `since` less the slack: an entry's id holds the server's time of its
// append, in ms) up to each stream's last entry when the audit began; nothing is taken from a
// consumer group. Every row of the window counts as the streams': the template covers every
// aggregate type. Entries the retention already trimmed cannot be seen: audit a window the
// retention still holds.

#include <cstdint>
#include <string>

#include "outbox/audit.hpp"

namespace outbox {

struct RedisAuditOptions : AuditWindow {
  std::string url = "redis://127.0.0.1:6379/0";
  std::string stream_template = "outbox:{aggregate_type}:{partition}";  // the relays'
};

// Throws InvalidArgument for a window PostgreSQL cannot read or an unusable template,
// DatabaseError, BrokerError (the streams could not be read within read_timeout).
AuditReport audit_redis_streams(const RedisAuditOptions& options);

}  // namespace outbox
