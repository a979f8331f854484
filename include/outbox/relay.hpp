#pragma once
// The relay: learns of committed outbox events (by claiming rows, or from a logical replication
// slot: RelaySource), publishes them through a Sink, and marks them published only after the
// broker's acknowledgement.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/health.hpp"
#include "outbox/metrics.hpp"
#include "outbox/schema.hpp"
#include "outbox/sink.hpp"
#include "outbox/stats.hpp"

namespace outbox {

// Where a relay learns about committed events (docs/ARCHITECTURE.md, "Change data capture").
enum class RelaySource {
  polling,  // claims pending rows with a lease (the default)
  cdc,      // reads a logical replication slot; the table stays the truth
};

// A change-data-capture relay's slot and publication. The role needs REPLICATION (or superuser)
// and the server wal_level = logical.
struct CdcOptions {
  std::string slot = "outbox";  // created if missing; [a-z0-9_], at most 63 characters
  std::string publication;      // empty: "<schema>_outbox"; created if missing (FOR TABLE
                                // <schema>.outbox_events WITH (publish = 'insert'))
  // How long an untouched row may stay pending behind the stream's position before the relay's
  // own claim takes it (a row from before the slot, a mark lost in a crash).
  std::chrono::milliseconds horizon_grace{10000};
  // How often the relay's own claim looks for what the stream does not bring (retries after
  // their backoff, released quarantine, rows behind the horizon). After a look that found
  // nothing (and could have found rows of every kind) the next waits ten times as long as that
  // look took, at most about ten table_polls: behind a large backlog the stream brings, each
  // look visits every pending aggregate for nothing.
  std::chrono::milliseconds table_poll{500};
  // How long a stalled relay (paused, frozen, cut off) keeps the slot: the server ends a stream
  // it hears nothing from for this long (the relay's wal_sender_timeout), and a standby relay
  // waiting for the slot takes it. The relay reports its position every third of it.
  std::chrono::milliseconds takeover{5000};
  // The most WAL the slot may hold back (from its restart_lsn to the server's current position)
  // before the relay lets it go: it drops the slot and publishes from the table by polling until
  // it has caught up, then streams again from a new slot. Nothing is lost either way (the table is
  // the truth); it keeps a relay that cannot keep up, or a broker that is down, from filling
  // PostgreSQL's disk. 0: no budget (max_slot_wal_keep_size, if set, is then the only bound).
  // At least 1 MiB; keep it well above the WAL written in 15 s (a slot's restart_lsn trails its
  // confirmed position by up to a checkpoint's running-transactions record).
  std::uint64_t wal_budget = std::uint64_t{4} << 30;  // 4 GiB
  // More than one stream: aggregates split over `shards` slots by a hash of the aggregate
  // (publication row filters). This relay serves shard `shard` (0 .. shards-1): its slot is
  // "<slot>_<shard>_of_<shards>", its publication "<publication>_<shard>_of_<shards>", and its own
  // claim takes only that shard's rows, so each shard needs a relay (more wait as standbys).
  // Changing `shards` drops the other sharding's slots once no relay streams from them.
  // 1: one stream, slot and publication as named. At most kMaxShards.
  unsigned shards = 1;
  unsigned shard = 0;
  // Also publish the events of table-less producers (ProducerOptions::table_less): they exist
  // only in the slot's WAL. The relay registers its slot for them (outbox_table_less_slots:
  // producers refuse to write without such a slot), so it needs wal_budget = 0 (letting the slot
  // go would lose them) and one shard (messages carry no row for a publication's filter). One it
  // cannot publish at once (a failed send, an earlier event of its aggregate still in the table,
  // a transaction past max_in_flight_bytes) is written to the table as a pending row and goes on
  // from there like any row. A relay without it refuses a registered slot, and stops when it
  // meets a table-less event rather than skip it.
  bool table_less = false;
};
inline constexpr unsigned kMaxShards = 64;

// The slot and publication names the relay of `cdc`'s shard uses ("<name>_<shard>_of_<shards>"
// with more than one shard; `publication` is the one the relay would use unsharded).
std::string shard_slot_name(const CdcOptions& cdc);
std::string shard_publication_name(const CdcOptions& cdc, const std::string& publication);

struct RelayOptions {
  std::string database_url;  // libpq connection string or URI; empty: the PG* variables
  SchemaName schema;
  std::string relay_id;  // empty: "<host>-<pid>-<random>"; appears in claimed_by

  std::size_t batch_size = 500;       // rows per claim statement
  std::size_t max_in_flight = 10000;  // sends awaiting a broker report
  // Payload and header bytes (as text) of the rows the relay holds: claimed and awaiting a broker
  // report. A claim takes rows while they fit; a row larger than this goes alone, once the relay
  // holds nothing else. The process needs about three times this (the claim's result, the rows,
  // and the sink's copy) on top of its base.
  std::uint64_t max_in_flight_bytes = std::uint64_t{64} << 20;  // 64 MiB
  std::chrono::milliseconds lease{30000};  // claim_until = now() + lease; renewed while in flight
  std::chrono::milliseconds backoff_base{500};    // first retry delay; doubles per attempt
  std::chrono::milliseconds backoff_max{300000};  // cap of the retry delay (before jitter)
  // Failed attempts after which an event is quarantined (0: retry forever). The default, with the
  // default backoff (mean delays summing to about an hour), gives a broker that long to come back
  // before events stop retrying.
  int max_attempts = 25;
  // Longest sleep when no NOTIFY arrives; a sleeping relay still wakes every 10 s to refresh
  // its outbox_relays row (producers stop waking relays whose row is 30 s old).
  std::chrono::milliseconds idle_poll_max{1000};
  std::chrono::milliseconds drain_timeout{10000};  // on stop: how long to wait for reports
  // After PostgreSQL fails: first reconnect delay, doubled per failed try up to the max.
  std::chrono::milliseconds reconnect_backoff_base{100};
  std::chrono::milliseconds reconnect_backoff_max{5000};
  // Commit claims, marks and failure records synchronously (wait for the WAL flush). Off, a
  // PostgreSQL crash can undo the last few hundred milliseconds of marks after their successors
  // were sent: a consumer without an inbox then sees "k, k+1, k, k+1" (the first publications stay
  // in order). On, that cannot happen, for one WAL flush per mark statement (docs/GUARANTEES.md
  // has the measured cost).
  bool durable_marks = false;
  RelaySource source = RelaySource::polling;
  CdcOptions cdc;  // with source = cdc
};

// The application_name of every relay session (pg_stat_activity shows it; the benchmark and the
// crash campaign find relays by it).
inline constexpr std::string_view kRelayApplicationName = "outbox-relay";

// What the relay counts, one entry each (outbox/stats.hpp says how a list reads). Prometheus
// exports the published, failed, fenced and quarantined totals by aggregate type
// (OUTBOX_AGGREGATE_TYPE_COUNTS), not here.
#define OUTBOX_RELAY_STATS(X)                                                                      \
  X(claimed, counter, never, "outbox_relay_events_claimed_total", "",                              \
    "Rows the relay claimed (a retried row counts each time).")                                    \
  X(published, counter, always, "", "published {}", "Rows marked published after the ack.")        \
  X(failed, counter, always, "", "failed {}",                                                      \
    "Sends that failed or had an unknown outcome (rescheduled).")                                  \
  X(fenced, counter, always, "", "fenced {}",                                                      \
    "Marks refused because the row no longer carried this relay's claim.")                         \
  X(quarantined, counter, always, "", "quarantined {}",                                            \
    "Events set aside: permanent failure or attempt limit reached.")                               \
  X(in_doubt, counter, when_set, "outbox_relay_events_in_doubt_total", "{} in doubt",              \
    "Events sent with no answer to a destination that cannot recognise a repeat (HTTP sink, "      \
    "--http-on-unknown reconcile): parked for `outbox reconcile`, never sent again by a relay.")   \
  X(in_flight, gauge, always, "outbox_relay_in_flight_events", "in flight {}",                     \
    "Events sent and not yet reported by the broker.")                                             \
  X(in_flight_bytes, gauge, always, "outbox_relay_in_flight_bytes", "{} bytes in flight",          \
    "Payload and header bytes of the events in flight.")                                           \
  X(reconnects, counter, always, "outbox_relay_reconnects_total", "reconnects {}",                 \
    "Times the relay got PostgreSQL back after losing it.")                                        \
  X(claim_queries, counter, always, "", "claim statements {}",                                     \
    "Claim statements run (each looks for up to a batch of heads).")                               \
  X(mark_queries, counter, always, "", "mark statements {}",                                       \
    "Mark statements run (each completes a group of acks).")                                       \
  X(check_queries, counter, never, "", "",                                                         \
    "Check statements a change-data-capture relay ran before sending streamed events.")            \
  X(successors, counter, never, "", "",                                                            \
    "Of the claimed rows: taken by the mark of their predecessor.")                                \
  X(unchecked, counter, never, "", "",                                                             \
    "Of the streamed rows (CDC): sent without the check statement, their predecessor sent and "    \
    "marked through the stream and their transaction ended before a snapshot the relay took.")     \
  X(leases_taken_over, counter, when_set, "outbox_relay_leases_taken_over_total",                  \
    "{} lease(s) taken over",                                                                      \
    "Rows claimed whose previous lease had expired or whose relay session had ended: a relay "     \
    "died or stalled holding them (each may be a re-publish).")                                    \
  X(slot_retained_bytes, optional_gauge, when_set, "outbox_relay_slot_retained_bytes",             \
    "slot holds {} bytes of WAL",                                                                  \
    "WAL the relay's replication slot holds back (current position - restart_lsn).")               \
  X(slot_lag_bytes, optional_gauge, when_set, "outbox_relay_slot_lag_bytes", "slot lags {} bytes", \
    "WAL not yet confirmed by the relay (current position - confirmed_flush_lsn).")                \
  X(slot_lag_ms, optional_gauge, when_set, "outbox_relay_slot_lag_seconds", "slot lags {} ms",     \
    "How old the oldest committed event the stream still owes may be.")                            \
  X(polling_fallback, flag, when_set, "outbox_relay_polling_fallback",                             \
    "slot let go over the WAL budget: polling",                                                    \
    "1 while a CDC relay publishes by polling after letting its slot go over the WAL budget.")     \
  X(slot_standby, flag, when_set, "outbox_relay_slot_standby",                                     \
    "standby: another relay streams the slot",                                                     \
    "1 while a CDC relay waits as standby for a slot another relay streams (publishing only "      \
    "what the table path publishes: retries, released quarantine).")                               \
  X(slot_released, counter, when_set, "outbox_relay_slot_releases_total",                          \
    "slot let go {} time(s) over the WAL budget",                                                  \
    "Times the relay let its replication slot go over its WAL budget.")                            \
  X(materialized, counter, when_set, "outbox_relay_events_materialized_total",                     \
    "{} table-less event(s) written to the table",                                                 \
    "Table-less events the relay wrote to the table to publish them from there.")                  \
  X(messages_rejected, counter, when_set, "outbox_relay_cdc_messages_rejected_total",              \
    "{} outbox message(s) rejected (see the log)",                                                 \
    "Logical decoding messages with the outbox prefix not published: not proven to come from a "   \
    "producer (forged), unreadable, or table-less at a relay without --table-less.")

// Counters since the relay started. Read from any thread. The CDC entries are -1 / false at a
// polling relay and until a stream has measured them (looked at every second while streaming).
// Any messages_rejected at all deserves a look (the OutboxCdcMessagesRejected alert; see
// relay/cdc/sequence_witness.hpp for why a message can be forged).
struct RelayStats {
  OUTBOX_RELAY_STATS(OUTBOX_STAT_FIELD)
  Health health = Health::starting;
  std::string last_error;  // latest database or broker error (kept after recovery)
  std::chrono::milliseconds last_error_age{0};  // how long ago last_error happened
  std::vector<StatSample> sink;                 // the sink's own statistics (Sink::stats())
};

// Every OUTBOX_RELAY_STATS entry of `stats`, in list order, then its sink's.
[[nodiscard]] std::vector<StatSample> stat_samples(const RelayStats& stats);

// RelayStats plus what the relay measures per aggregate type and as distributions.
struct RelayMetrics {
  RelayStats stats;
  std::vector<std::pair<std::string, AggregateTypeCounts>> by_aggregate_type;
  // From the event's transaction (occurred_at: the transaction's start, by PostgreSQL's clock) to
  // the broker's ack, for acked sends; seconds.
  HistogramSnapshot commit_to_ack;
  HistogramSnapshot send_to_ack;  // from the send to the broker's ack; seconds
  HistogramSnapshot claim_batch;  // rows per claim statement that claimed any
};

// Thread safety: run() and run_until_idle() from one thread at a time; request_stop(), stats()
// and relay_id() from any thread; request_stop() is also async-signal-safe.
class Relay {
 public:
  // Connects to PostgreSQL. A server not reachable yet is no error: health() says
  // database_unavailable and run() keeps trying with the reconnect backoff. Throws DatabaseError
  // for what no retry fixes (wrong password, unknown database), ConfigError for a schema without
  // the migrations this build needs, InvalidArgument on bad options.
  Relay(RelayOptions options, std::unique_ptr<Sink> sink);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Publishes until request_stop(); then stops claiming, waits up to drain_timeout for the
  // reports of what is in flight, records them, and returns. Rows still unreported keep their
  // lease and are retaken by any relay once it expires (a re-publish, never a loss).
  // Survives PostgreSQL outages: on a retryable DatabaseError it reports
  // Health::database_unavailable, keeps collecting broker acks, reconnects with capped
  // exponential backoff, then writes the acks it kept and goes on. Throws DatabaseError only for
  // errors no retry can fix (missing schema, permission denied).
  void run();

  // Publishes until nothing is claimable and nothing is in flight, or until `limit` passes.
  // Returns true when it went idle. For tests, tools and batch jobs.
  bool run_until_idle(std::chrono::milliseconds limit);

  void request_stop() noexcept;
  [[nodiscard]] RelayStats stats() const;
  [[nodiscard]] RelayMetrics metrics() const;
  [[nodiscard]] const std::string& relay_id() const noexcept;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox
