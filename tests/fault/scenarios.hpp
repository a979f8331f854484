#pragma once
// Two focused scenarios beside the random campaign (see docs/GUARANTEES.md):
//  - stalled relay: a backlog of tens of thousands of events builds while no relay runs; two
//    relays then drain it. Reports the drain time, that order held, and that the database load
//    stayed bounded (rows a claim touches, the slowest relay statement).
//  - hot aggregates: many writers on a few aggregates, transactions held open for random times
//    so commit order differs from start order; relays run throughout. Nothing may be skipped or
//    inverted.
//  - relay kill: steady traffic, two relays with default settings (30 s lease); one is SIGKILLed
//    again and again. Per kill, every event the killed relay held (pending, under its lease) is
//    timed from the kill until another relay marked it published (after the broker's ack):
//    prints the recovery p50/p99/max over those events and the slowest kill.

#include <string>

namespace outbox::campaign {

struct ScenarioOptions {
  std::string outbox_binary;
  std::string self_binary;
  int events = 30000;
  int aggregates = 1000;
  int writers = 8;
  int seconds = 10;
  int kills = 25;             // relay kill
  int broker_rtt_ms = 10;     // relay kill: the brokers' answer time, so relays hold rows in flight
  int trials_per_fault = 20;  // cdc: trials of each fault kind
  bool table_less = false;    // cdc: table-less producers, relays with --table-less
  std::string only_fault;     // cdc: this fault kind alone (its name as printed), "" for all
  bool verbose = false;
  bool keep = false;
};

int run_stalled_relay(const ScenarioOptions& options);
int run_hot_aggregates(const ScenarioOptions& options);
int run_relay_kill(const ScenarioOptions& options);
//  - paused across a restart: three relays, steady traffic with 15% on three hot aggregates; r1
//    is SIGSTOPped while it holds a hot head, PostgreSQL is crash-restarted (after 40 ms without
//    synchronous commits, so the crash undoes relay marks whose claims are on disk), r2 and r3 are
//    SIGKILLed (and started again) within the restart grace, then r1 resumes. Fails when the last
//    event is published later than the restart grace (10 s) after the last commit, r1's rows
//    later than the restart grace plus the reconnect backoff and 2 s (17 s) after the restart, or
//    a claim stays 2 s or more under a session no outbox_relays row names (only its lease, 30 s,
//    would free it).
int run_paused_across_restart(const ScenarioOptions& options);
//  - cdc: two change-data-capture relays on one slot (one streams, one waits), steady traffic,
//    and faults in turn: a relay SIGKILLed (between publishes and confirms), a relay paused past
//    the takeover, PostgreSQL crash-restarted, the slot dropped mid-stream, the slot invalidated
//    by max_slot_wal_keep_size. Then the history is checked as for every scenario. With
//    table_less the producers write no rows (their transactions record the event ids in a
//    business table, campaign.intents, for the checker) and the relays run with --table-less;
//    the slot faults are left out, since a lost slot loses such events by design.
int run_cdc_faults(const ScenarioOptions& options);
//  - retention gap (retention_gap.cpp): the broker drops messages a lagging consumer had not
//    applied; the consumer must stop the partition, show it on /metrics and /readyz, and the
//    audit must name the events as not applied.
int run_retention_gap(const ScenarioOptions& options);
//  - http (http_campaign.cpp): two relays with --sink http deliver to an in-process receiver
//    while relays are killed between the 2xx and the mark, the receiver goes down and comes back,
//    and it answers slower than the request timeout; `reconcile`: a receiver without
//    idempotency, the relays in reconcile mode, `outbox reconcile check` settling what is in
//    doubt. Lost, phantom, duplicate effects and inversions must all be 0. `blind` (retry mode
//    only): the receiver applies blindly too, to show what reconcile mode prevents (it fails).
int run_http_faults(const ScenarioOptions& options, bool reconcile, bool blind);
// The NATS sink and consumer: relays killed between the PubAck and the mark, nats-server killed
// and restarted, the consumer killed after its inbox commit.
int run_nats_faults(const ScenarioOptions& options);
// The same for RabbitMQ: relays killed between the confirm and the mark, rabbitmq-server killed
// and restarted, the consumer killed after its inbox commit (tests/fault/broker_campaign.cpp).
int run_rabbitmq_faults(const ScenarioOptions& options);
// The same for Redis Streams: relays killed between the reply and the mark, redis-server killed
// (its AOF fsynced on each write) and restarted, the consumer killed after its inbox commit.
int run_redis_faults(const ScenarioOptions& options);

}  // namespace outbox::campaign
