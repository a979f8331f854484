#pragma once
// The relay's counters: written by the relay's thread, read by stats() from any thread. One
// struct, so a snapshot is one function and a new counter one line here and one in snapshot().

#include <atomic>
#include <cstdint>

#include "outbox/relay.hpp"

namespace outbox::detail {

struct RelayCounters {
  using Counter = std::atomic<std::uint64_t>;
  Counter claimed{0};
  Counter published{0};
  Counter failed{0};
  Counter fenced{0};
  Counter quarantined{0};
  Counter claim_queries{0};
  Counter mark_queries{0};
  Counter successors{0};
  Counter in_flight{0};        // a gauge: set, not added
  Counter in_flight_bytes{0};  // a gauge
  Counter reconnects{0};
  // Change data capture (RelayStats says what each means).
  using Gauge = std::atomic<std::int64_t>;
  Gauge slot_retained_bytes{-1};
  Gauge slot_lag_bytes{-1};
  Gauge slot_lag_ms{-1};
  std::atomic<bool> polling_fallback{false};
  std::atomic<bool> slot_standby{false};
  Counter slot_released{0};
  Counter materialized{0};

  static void add(Counter& counter, std::uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  static void set(Counter& gauge, std::uint64_t value) {
    gauge.store(value, std::memory_order_relaxed);
  }
  static void set(Gauge& gauge, std::int64_t value) {
    gauge.store(value, std::memory_order_relaxed);
  }
  // Not streaming: the slot's figures are unknown (-1) until a stream reads them again.
  void forget_slot_gauges() {
    set(slot_retained_bytes, -1);
    set(slot_lag_bytes, -1);
    set(slot_lag_ms, -1);
  }

  // Every counter into `stats` (health and errors are the HealthBoard's).
  void snapshot(RelayStats& stats) const {
    auto read = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
    stats.claimed = read(claimed);
    stats.published = read(published);
    stats.failed = read(failed);
    stats.fenced = read(fenced);
    stats.quarantined = read(quarantined);
    stats.claim_queries = read(claim_queries);
    stats.mark_queries = read(mark_queries);
    stats.successors = read(successors);
    stats.in_flight = read(in_flight);
    stats.in_flight_bytes = read(in_flight_bytes);
    stats.reconnects = read(reconnects);
    stats.slot_retained_bytes = slot_retained_bytes.load(std::memory_order_relaxed);
    stats.slot_lag_bytes = slot_lag_bytes.load(std::memory_order_relaxed);
    stats.slot_lag_ms = slot_lag_ms.load(std::memory_order_relaxed);
    stats.polling_fallback = polling_fallback.load(std::memory_order_relaxed);
    stats.slot_standby = slot_standby.load(std::memory_order_relaxed);
    stats.slot_released = read(slot_released);
    stats.materialized = read(materialized);
  }
};

}  // namespace outbox::detail
