// CdcSource and its slot: the sweep of other shardings' slots, the lag and the WAL budget, and the
// modes (slot_mode.hpp): waiting as a standby, letting the slot go, and streaming again.
#include <fmt/format.h>

#include <algorithm>

#include "cdc/slot_admin.hpp"
#include "common/log.hpp"
#include "outbox/error.hpp"
#include "relay/cdc/cdc_source.hpp"

namespace outbox::detail {

// Slots of another sharding of the same slot name ("<slot>" and "<slot>_<i>_of_<n>" for another
// n) that no relay streams from: left by a change of cdc.shards, they would hold WAL forever. The
// table is the truth, so dropping them loses nothing: what they held and no relay marked is
// pending, and older than the new slots' horizons. Slots registered for table-less events hold
// the only copy of their events: never dropped.
void CdcSource::drop_other_shardings() {
  next_sharding_sweep_ = Clock::now() + kShardingSweepEvery;  // again later: one active now
  const std::string& base = options_.cdc.slot;
  PGconn* conn = table_.connection();
  for (const std::string& name : cdc_sql::idle_slots_of(conn, options_.schema, base)) {
    const std::optional<unsigned> shards = cdc::sharding_of(name.substr(base.size()));
    if (!shards || *shards == options_.cdc.shards) continue;  // not a sharding of ours, or ours
    try {
      cdc::drop_slot(conn, name);
      log().warn(
          "relay {}: dropped slot {} of another sharding than {} shard(s); the table "
          "path publishes what it held",
          options_.relay_id, name, options_.cdc.shards);
    } catch (const DatabaseError& error) {
      if (error.retryable() && error.sqlstate() != "55006" && error.sqlstate() != "42704") throw;
      log().info("relay {}: slot {} of another sharding not dropped: {}", options_.relay_id, name,
                 error.what());
    }
  }
}

// In the stats, and in the session's outbox_relays row (`outbox status`, the admin page), with
// the walsender while streaming: status names a streaming relay only when its slot's walsender is
// that one.
void CdcSource::show_mode() {
  const slot_mode::Flags flags = slot_mode::flags(mode_);
  counters_.polling_fallback.store(flags.polling_fallback, std::memory_order_relaxed);
  counters_.slot_standby.store(flags.slot_standby, std::memory_order_relaxed);
  table_.set_stream({publications_.slot(), std::string(slot_mode::name(mode_)),
                     polling() ? 0 : session_.stream->backend_pid()});
}

// The slot's lag: WAL it holds back and has not been confirmed (bytes), and how old the oldest
// committed event the stream owes may be (its certain position's age). Past the budget it is
// let go.
bool CdcSource::look_at_slot() {
  const std::optional<cdc::SlotLag> lag = cdc::slot_lag(table_.connection(), publications_.slot());
  if (!lag) return false;
  RelayCounters::set(counters_.slot_retained_bytes, lag->retained_bytes);
  RelayCounters::set(counters_.slot_lag_bytes, std::max<std::int64_t>(0, lag->unconfirmed_bytes));
  const std::int64_t position = certain_position();
  RelayCounters::set(
      counters_.slot_lag_ms,
      position == 0 ? -1 : std::max<std::int64_t>(0, (lag->server_time - position) / 1000));
  if (options_.cdc.wal_budget == 0 ||
      lag->retained_bytes <= static_cast<std::int64_t>(options_.cdc.wal_budget)) {
    return false;
  }
  release_slot(lag->retained_bytes);
  return true;
}

// Another relay streams from the slot: this one waits for it as a standby, and meanwhile records
// the outcomes of what it has in flight and publishes what only the table path publishes (touched
// rows: retries, released quarantine), beside the streaming relay's own table path.
void CdcSource::wait_as_standby() {
  const slot_mode::Entered entered = slot_mode::enter_standby(mode_, Clock::now());
  if (entered.announce) {
    log().info("relay {}: slot {} is streamed by another relay; waiting as its standby",
               options_.relay_id, publications_.slot());
  }
  mode_ = entered.mode;
  reset_session();
  show_mode();
  counters_.forget_slot_gauges();
  table_.set_listening(listening_);
}

void CdcSource::release_slot(std::int64_t retained) {
  log().warn(
      "relay {}: slot {} holds {} MiB of WAL, over the budget of {} MiB (cdc.wal_budget): "
      "letting it go; the relay publishes from the table until it has caught up, then "
      "streams from a new slot",
      options_.relay_id, publications_.slot(), retained >> 20, options_.cdc.wal_budget >> 20);
  mode_ = slot_mode::release(horizon(), session_.stream->backend_pid(), Clock::now());
  try {
    session_.stream->stop(std::chrono::seconds(1));
  } catch (const DatabaseError& error) {
    log().debug("relay {}: ending the replication stream: {}", options_.relay_id, error.what());
  }
  // The walsender exits and lets the slot go; what was read and is not out stays pending in the
  // table (never table-less events: their relays have no budget).
  reset_session();
  RelayCounters::add(counters_.slot_released, 1);
  show_mode();
  counters_.forget_slot_gauges();
  table_.set_listening(listening_);
  drop_released_slot();
}

// Drops the slot we let go once our walsender has left it; one another relay streams from now is
// not ours to drop (its own budget applies).
void CdcSource::drop_released_slot() {
  const int walsender = slot_mode::walsender(mode_);
  if (walsender == 0) return;
  const std::string& slot = publications_.slot();
  const std::optional<int> holder = cdc::slot_holder(table_.connection(), slot);
  if (holder && *holder == walsender) return;  // ours, still exiting: next turn
  if (holder && *holder != 0) {
    log().info("relay {}: slot {} is streamed by another relay now (walsender {}); not dropping it",
               options_.relay_id, slot, *holder);
  } else if (holder) {
    try {
      cdc::drop_slot(table_.connection(), slot);
      log().info("relay {}: dropped replication slot {}", options_.relay_id, slot);
    } catch (const DatabaseError& error) {
      if (error.retryable() && error.sqlstate() != "55006" && error.sqlstate() != "42704") throw;
      // 55006: another relay took it meanwhile; 42704: someone dropped it first.
      log().info("relay {}: slot {} not dropped: {}", options_.relay_id, slot, error.what());
    }
  }
  // Dropped, gone already (an operator, another relay), or another relay's.
  slot_mode::walsender_gone(mode_);
}

// Streamed events carry no token and their rows look untouched: while one is in flight or its
// outcome unwritten, the table path keeps the horizon it had, or it would send them again (its
// claim takes an aggregate's lowest pending row, so never one behind them).
bool CdcSource::any_streamed_out(const SendWindow& window) const {
  const auto streamed = [](const auto& outcome) { return outcome.origin == Origin::unclaimed; };
  return std::any_of(window.in_flight().begin(), window.in_flight().end(),
                     [](const auto& entry) { return entry.second.origin == Origin::unclaimed; }) ||
         marks_.pending() || !retry_published_.empty() || !retry_failed_.empty() ||
         std::any_of(window.published().begin(), window.published().end(), streamed) ||
         std::any_of(window.failed().begin(), window.failed().end(), streamed);
}

bool CdcSource::fallback_duties(Clock::time_point now, const SendWindow& window) {
  drop_released_slot();
  bool news = false;
  if (slot_mode::streamed_out(mode_) && now >= next_table_poll_) {
    next_table_poll_ = now + options_.cdc.table_poll;
    if (!any_streamed_out(window)) news = slot_mode::nothing_streamed_out(mode_);
  }
  if (now < next_stream_try_) return news;
  next_stream_try_ = now + options_.cdc.table_poll;
  // Another relay streams the slot (a standby took it after this one let go, or this one is the
  // standby): wait. A missing slot is created, which waits for every transaction writing at that
  // moment to end, and the loop with it.
  const cdc::SlotActivity seen = cdc::slot_activity(table_.connection(), publications_.slot());
  const slot_mode::Next next = slot_mode::slot_seen(mode_, seen, now, options_.cdc.horizon_grace);
  if (next.horizon_changed) news = true;
  if (next.step == slot_mode::Next::Step::wait_for_writers) {
    log().debug(
        "relay {}: not creating slot {} while {} transaction(s) have been writing for "
        "over a second (creating it would wait for them)",
        options_.relay_id, publications_.slot(), seen.long_writers);
  }
  if (next.step != slot_mode::Next::Step::try_stream) return news;
  return try_stream_again(now) || news;
}

bool CdcSource::try_stream_again(Clock::time_point now) {
  bool streaming = false;
  try {
    streaming = try_start_stream();
  } catch (const DatabaseError& error) {
    if (!error.retryable()) throw;
    log().info("relay {}: streaming from slot {} failed ({}); polling on", options_.relay_id,
               publications_.slot(), error.what());
    reset_session();
  }
  if (!streaming) {
    slot_mode::stream_try_failed(mode_, now);  // caught up again after another horizon_grace
    return false;
  }
  const bool released = std::holds_alternative<slot_mode::Released>(mode_);
  log().info("relay {}: streaming from slot {}{}", options_.relay_id, publications_.slot(),
             released ? " again, caught up from the table" : " (was the standby)");
  mode_ = slot_mode::Streaming{};
  show_mode();
  table_.set_listening(false);  // registered awake again
  next_table_poll_ = now;
  return true;
}

}  // namespace outbox::detail
