#pragma once
// The Redis Streams sink: the relay appends each event to a stream (hiredis, RESP2) through one
// server-side script that records the event id beside the append, and takes the script's reply
// as the acknowledgement. Part of the outbox::redis target.
//
// What a reply means: the entry is in the server's memory, and, with appendonly yes and
// appendfsync always (checked at each connect; refused otherwise unless allow_volatile_acks), in
// its append-only file, fsynced before the reply was written: a crash of the server loses no
// acknowledged entry. The reply does not wait for replicas: a failover to a replica that had not
// received it can lose it (Redis replication is asynchronous); run outbox against the primary and
// fail over by hand after its replicas caught up, or accept that window.
//
// Duplicates: the script keeps, beside each stream, a sorted set "<stream>:outbox-dedup" of the
// event ids appended within the dedup window and appends an id it holds no second time (the
// reply says so: published, counted as redis_duplicates). A repeat after the window is a second
// entry, which the consumer's inbox recognises by event_id. The window must cover a takeover
// (the relay checks it against its lease and backoff).
//
// Streams: the template may hold {aggregate_type} and {partition} (Kafka's murmur2 of the
// aggregate id over `partitions`), never the aggregate id or the event type: each aggregate's
// events go to one stream, in order, and a consumer group reads each stream in order.
//
// Trimming (retention > 0): now and then, per stream, entries older than the retention are
// removed (XTRIM MINID, exact), but never one a consumer group of the stream has not acknowledged
// or not yet read: the cut stops at the oldest entry some group still needs, and how long such an
// entry has been held past the retention is reported (redis_trim_held_back_ms; alert
// OutboxRedisTrimHeldBack). Without retention the streams grow until someone trims them.
//
// An entry's fields: event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,
// schema_version, occurred_at, headers (the event's JSON object, traceparent included), payload.
//
// Redis Cluster is not supported (hiredis 0.14 has no cluster client): one server, or a
// Sentinel-managed primary named by its address. hiredis writes with write(2): a program that
// embeds the sink (or RedisInboxConsumer) should ignore SIGPIPE, as outbox's programs do, or a
// server that closes the connection kills it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "outbox/event.hpp"
#include "outbox/sink.hpp"

namespace outbox {

struct RedisSinkOptions {
  std::string url = "redis://127.0.0.1:6379/0";  // redis://[[user]:password@]host[:port][/db]
  std::string stream_template = "outbox:{aggregate_type}:{partition}";
  std::uint32_t partitions = 16;  // for {partition}: 1 to 4096
  // `outbox relay` makes it the relay's longest retry, at least 2 minutes, unless
  // --redis-dedup-window says otherwise.
  std::chrono::milliseconds dedup_window{std::chrono::minutes(2)};
  // The relay's longest retry (max(lease, backoff max) + reply timeout): a shorter dedup window
  // is refused. 0: not checked.
  std::chrono::milliseconds min_dedup_window{0};
  std::chrono::milliseconds reply_timeout{5000};  // no reply by then: an unknown outcome
  // The relay's lease: a send must end before it. 0: not checked.
  std::chrono::milliseconds max_reply_timeout{0};
  std::chrono::milliseconds connect_timeout{2000};
  // Accept a server that may lose acknowledged entries in a crash (no AOF, or not fsynced on
  // each write). Off: such a server stops the relay with what to set.
  bool allow_volatile_acks = false;
  std::chrono::milliseconds retention{0};          // 0: no trimming
  std::chrono::milliseconds trim_interval{10000};  // per stream, at most this often
  // Bytes written and not yet taken by the server beyond which sends fail (retried): a server
  // that stopped reading.
  std::size_t max_unsent_bytes = 16 * 1024 * 1024;
};

// Throws ConfigError for an unusable URL, template, partition count, window or timeout. Does not
// wait for the server: it connects on the first send, and again after a lost connection (at most
// once a second); a server without durable persistence (unless allowed) or that refuses the login
// stops the relay with a ConfigError that says what to change.
std::unique_ptr<Sink> make_redis_sink(const RedisSinkOptions& options);

// The stream `event` is appended to (exposed for tests and tools).
std::string render_redis_stream(const RedisSinkOptions& options, const Event& event);

}  // namespace outbox
