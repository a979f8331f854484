#include "relay/relay_options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <random>

#include "cdc/replication_stream.hpp"
#include "common/printable.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"

namespace outbox::detail {

namespace {

std::string default_relay_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return fmt::format("{}-{}-{:06x}", host, ::getpid(), random() & 0xFFFFFF);
}

void check_cdc(const CdcOptions& cdc) {
  if (cdc.shards == 0 || cdc.shards > kMaxShards || cdc.shard >= cdc.shards) {
    throw InvalidArgument(fmt::format(
        "relay: cdc.shards is {} and cdc.shard {}; shards must be 1 to {} and shard 0 to "
        "shards - 1",
        cdc.shards, cdc.shard, kMaxShards));
  }
  cdc::validate_slot_name(cdc.slot);
  cdc::validate_slot_name(shard_slot_name(cdc));
  if (!cdc.publication.empty()) {
    cdc::validate_publication_name(cdc.publication);
    cdc::validate_publication_name(shard_publication_name(cdc, cdc.publication));
  }
  if (cdc.takeover < std::chrono::milliseconds(300)) {
    throw InvalidArgument(fmt::format(
        "relay: cdc.takeover is {} ms; it must be at least 300 ms (the relay reports its "
        "position every third of it)",
        cdc.takeover.count()));
  }
  if (cdc.wal_budget != 0 && cdc.wal_budget < kMinWalBudget) {
    throw InvalidArgument(fmt::format(
        "relay: cdc.wal_budget is {} bytes; it must be 0 (no budget) or at least 1 MiB (a "
        "slot's restart_lsn trails its confirmed position by up to 15 s of WAL)",
        cdc.wal_budget));
  }
  if (cdc.wal_budget > kMaxWalBudget) {
    throw InvalidArgument(fmt::format(
        "relay: cdc.wal_budget is {} bytes; it must be at most 1 PiB (no disk holds more WAL; "
        "0 turns the budget off)",
        cdc.wal_budget));
  }
  if (cdc.takeover > kMaxTakeover) {
    throw InvalidArgument(fmt::format(
        "relay: cdc.takeover is {} ms; it must be at most 1 hour (a stalled relay keeps the slot "
        "that long, and the server's wal_sender_timeout is an int of milliseconds)",
        cdc.takeover.count()));
  }
  if (cdc.table_less && cdc.wal_budget != 0) {
    throw InvalidArgument(
        "relay: cdc.table_less needs cdc.wal_budget = 0: table-less events exist only in the "
        "slot's WAL, and letting the slot go over a budget would lose them (bound the WAL with "
        "max_slot_wal_keep_size and watch slot_retained_bytes instead)");
  }
  if (cdc.table_less && cdc.shards != 1) {
    throw InvalidArgument(
        "relay: cdc.table_less needs one shard: a table-less event is a message, not a row, and "
        "no publication row filter splits messages, so every shard would publish every event");
  }
  // At most an hour: the table path's longest wait is about ten of them (TableSweep), and a
  // sweep that late leaves retries and released quarantine waiting that long.
  if (cdc.table_poll < std::chrono::milliseconds(10) || cdc.table_poll > std::chrono::hours(1) ||
      cdc.horizon_grace.count() < 0) {
    throw InvalidArgument(
        "relay: cdc.table_poll must be between 10 ms and 1 hour and cdc.horizon_grace not "
        "negative");
  }
}

}  // namespace

namespace {

// A relay id is the first part of its sessions' names and claim tokens ("<id>:<session>:<n>"),
// and a dead session's claims are taken over by that prefix: an id with ':' could make another
// relay's live session look like a part of a dead one ("a:0000000000000001:x" starts with
// session "a:0000000000000001"). It is also printed in logs, status and the admin page.
void check_relay_id(const std::string& id) {
  const auto refuse = [&](const std::string& why) {
    throw InvalidArgument(
        fmt::format("relay: relay id \"{}\" {}; use letters, digits, '-', '_' "
                    "or '.' (e.g. the host name and a number)",
                    printable(id, 80), why));
  };
  if (id.size() > 100) refuse(fmt::format("is {} bytes long; at most 100", id.size()));
  if (id.find(':') != std::string::npos) {
    refuse(
        "has a ':', which separates the parts of a claim token: another relay's claims "
        "could be taken for this one's");
  }
  if (const auto hostile = find_hostile_character(id)) {
    refuse(fmt::format("has {} at byte {}", hostile->what, hostile->offset));
  }
  if (id.find_first_not_of(' ') == std::string::npos) refuse("is blank");
}

}  // namespace

RelayOptions checked(RelayOptions options, std::chrono::milliseconds shortest_idle_wait) {
  if (options.relay_id.empty()) options.relay_id = default_relay_id();
  check_relay_id(options.relay_id);
  if (options.batch_size == 0 || options.max_in_flight == 0) {
    throw InvalidArgument("relay: batch_size and max_in_flight must be at least 1");
  }
  if (options.batch_size > kMaxBatchSize) {
    throw InvalidArgument(
        fmt::format("relay: batch_size is {}; it must be at most {} (rows per claim statement)",
                    options.batch_size, kMaxBatchSize));
  }
  if (options.max_in_flight_bytes == 0 || options.max_in_flight_bytes > kMaxInFlightBytes) {
    throw InvalidArgument(fmt::format(
        "relay: max_in_flight_bytes is {}; it must be at least 1 byte (a row larger than it "
        "still goes alone) and at most 1 TiB (the relay needs about three times it in memory)",
        options.max_in_flight_bytes));
  }
  if (options.max_attempts < 0) {
    throw InvalidArgument("relay: max_attempts must be 0 (no limit) or more");
  }
  if (options.idle_poll_max < shortest_idle_wait) {
    throw InvalidArgument(fmt::format(
        "relay: idle_poll_max is {} ms; it must be at least {} ms (an idle relay sleeps that "
        "long at most between looks)",
        options.idle_poll_max.count(), shortest_idle_wait.count()));
  }
  if (options.lease < std::chrono::milliseconds(100)) {
    throw InvalidArgument(
        "relay: lease must be at least 100 ms (it bounds how long a crashed "
        "relay's rows wait before another relay takes them)");
  }
  if (options.backoff_base.count() <= 0 || options.backoff_max < options.backoff_base) {
    throw InvalidArgument(fmt::format(
        "relay: backoff_base (--backoff-base-ms) is {} and backoff_max (--backoff-max-ms) {}; the "
        "first retry delay must be positive and at most the longest",
        format_duration(options.backoff_base), format_duration(options.backoff_max)));
  }
  if (options.reconnect_backoff_base.count() <= 0 ||
      options.reconnect_backoff_max < options.reconnect_backoff_base) {
    throw InvalidArgument(
        "relay: reconnect_backoff_base must be positive and reconnect_backoff_max at least as "
        "large");
  }
  if (options.source == RelaySource::cdc) {
    check_cdc(options.cdc);
  } else if (options.cdc.table_less) {
    throw InvalidArgument(
        "relay: cdc.table_less needs the cdc source: table-less events exist only in the WAL, "
        "which the polling relay does not read");
  }
  return options;
}

}  // namespace outbox::detail

namespace outbox {

std::string shard_slot_name(const CdcOptions& cdc) {
  return cdc.shards <= 1 ? cdc.slot : fmt::format("{}_{}_of_{}", cdc.slot, cdc.shard, cdc.shards);
}

std::string shard_publication_name(const CdcOptions& cdc, const std::string& publication) {
  return cdc.shards <= 1 ? publication
                         : fmt::format("{}_{}_of_{}", publication, cdc.shard, cdc.shards);
}

}  // namespace outbox
