#pragma once
// Retention: deletes finished outbox events (published or skipped) once they are older than the
// replay horizon, and inbox ids once they are older than the inbox's horizon, in bounded batches.
// Nothing pending is ever deleted, also not when the cleanup dies mid-batch (each batch is one
// transaction; a crash rolls that batch back).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "outbox/schema.hpp"

struct pg_conn;
typedef struct pg_conn PGconn;

namespace outbox {

// The shortest retention cleanup accepts (unless CleanupOptions::allow_short_retention).
inline constexpr std::chrono::milliseconds kMinimumRetention = std::chrono::hours(1);

struct CleanupOptions {
  SchemaName schema;
  // Published and skipped events stay this long after they were finished: the replay horizon.
  // At least kMinimumRetention.
  std::chrono::milliseconds retention = std::chrono::hours(24 * 7);
  // Accept a retention below kMinimumRetention. For tests that must see rows deleted within
  // seconds; never in production (events published moments ago would go).
  bool allow_short_retention = false;
  // Inbox ids (processed_events) stay this long after they were processed; empty: forever. Must
  // be at least `retention`, or replaying a kept event could apply it a second time.
  std::optional<std::chrono::milliseconds> inbox_retention;
  // Rows examined per batch (one short transaction each). Bounds lock time and WAL per commit.
  std::size_t batch_size = 5000;
  // Pause between batches, to leave the database room for the relay and producers.
  std::chrono::milliseconds pause{0};
  // Count what would be deleted instead of deleting it.
  bool dry_run = false;
};

// An inbox consumer of this database (processed_events) that has applied nothing since before
// the cleanup's cutoff: events published after `last_applied_at` are deleted although it may
// never have applied them, and a replay can no longer bring them back. Or it is idle or retired:
// the cleanup cannot tell, so it warns. It sees only consumers whose inbox is in this database,
// and a whole consumer standing still: a consumer with one partition stopped at an offset gap
// (KafkaInboxConsumer) applies on its other partitions and is not named; its own alert
// (OutboxConsumerOffsetGap) is what tells of that.
struct ConsumerBehind {
  std::string consumer;
  std::string last_applied_at;  // timestamptz text
};

struct CleanupReport {
  std::uint64_t events_deleted = 0;  // or, with dry_run, that would be deleted
  std::uint64_t inbox_deleted = 0;
  std::uint64_t batches = 0;
  std::vector<ConsumerBehind> consumers_behind;  // also logged as warnings
};

// Throws InvalidArgument saying what is wrong with `options` (cleanup() checks them too).
void check_cleanup_options(const CleanupOptions& options);

// Runs until nothing more is due. First looks for inbox consumers in this database that are
// behind the cutoff (CleanupReport::consumers_behind): it warns and deletes anyway, since it
// cannot tell a lagging consumer from an idle one, and a cleanup held back by a retired consumer
// would let the table grow without bound (docs/OPERATIONS.md, OutboxConsumerOffsetGap). Every batch
// that deletes records its cutoff in outbox_cleanup_horizon, so that resolve_commit never takes a
// deleted event for a rolled-back one. `conn` must be idle (no open transaction). Concurrent
// relays, producers, consumers and other cleanups are safe. Throws InvalidArgument for bad options
// (before anything is deleted) and DatabaseError; batches committed before an error stay deleted.
CleanupReport cleanup(PGconn* conn, const CleanupOptions& options);

}  // namespace outbox
