#pragma once
// The relay's counters: written by the relay's thread, read by stats() from any thread. Each is
// an entry of OUTBOX_RELAY_STATS or OUTBOX_AGGREGATE_TYPE_COUNTS (outbox/relay.hpp,
// outbox/metrics.hpp); a new counter is an entry there, not a line here.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/histogram.hpp"
#include "common/stat_list.hpp"
#include "outbox/metrics.hpp"
#include "outbox/relay.hpp"

namespace outbox::detail {

// Counts by aggregate type (AggregateTypeCounts). The relay's thread looks a type up (index())
// and adds; any thread reads (snapshot()). Entries never move (a deque), and a new one is added
// under the mutex the reader takes, so the writer's lookups need no lock. Past
// kMaxAggregateTypeLabels types, the rest share one entry (kOtherAggregateTypes).
class TypedCounts {
 public:
#define OUTBOX_TYPED_KIND(field, ...) field,
  enum Kind : std::size_t { OUTBOX_AGGREGATE_TYPE_COUNTS(OUTBOX_TYPED_KIND) kKinds };
#undef OUTBOX_TYPED_KIND
  using Index = std::uint32_t;

  // The relay's thread only.
  Index index(std::string_view aggregate_type) {
    if (const auto it = index_.find(aggregate_type); it != index_.end()) return it->second;
    std::lock_guard lock(mutex_);
    // A type named like the shared entry is that entry: two series of one name and labels
    // would make the whole scrape invalid.
    const bool named_other = aggregate_type == kOtherAggregateTypes;
    if (entries_.size() >= kMaxAggregateTypeLabels || named_other) {
      if (other_ == kNone) {
        other_ = static_cast<Index>(entries_.size());
        entries_.emplace_back(kOtherAggregateTypes);
        index_.emplace(entries_.back().name, other_);
      }
      return other_;
    }
    const auto index = static_cast<Index>(entries_.size());
    entries_.emplace_back(std::string(aggregate_type));
    index_.emplace(entries_.back().name, index);
    return index;
  }
  void add(Index index, Kind kind, std::uint64_t n = 1) {
    entries_[index].counts[kind].fetch_add(n, std::memory_order_relaxed);
  }

  [[nodiscard]] std::vector<std::pair<std::string, AggregateTypeCounts>> snapshot() const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, AggregateTypeCounts>> out;
    for (const Entry& entry : entries_) {
      AggregateTypeCounts counts;
#define OUTBOX_TYPED_READ(field, ...) \
  counts.field = entry.counts[field].load(std::memory_order_relaxed);
      OUTBOX_AGGREGATE_TYPE_COUNTS(OUTBOX_TYPED_READ)
#undef OUTBOX_TYPED_READ
      out.emplace_back(entry.name, counts);
    }
    return out;
  }

 private:
  static constexpr Index kNone = ~Index{0};
  struct Entry {
    explicit Entry(std::string type) : name(std::move(type)) {}
    std::string name;
    std::array<std::atomic<std::uint64_t>, kKinds> counts{};
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;
  std::unordered_map<std::string_view, Index, Hash, std::equal_to<>> index_;  // views of names
  Index other_ = kNone;
};

}  // namespace outbox::detail

namespace outbox::detail {

struct RelayCounters {
  using Counter = std::atomic<std::uint64_t>;
  using Gauge = std::atomic<std::int64_t>;
  OUTBOX_RELAY_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  TypedCounts by_type;
  Histogram commit_to_ack = latency_histogram();                                // seconds
  Histogram send_to_ack = latency_histogram();                                  // seconds
  Histogram claim_batch{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};  // rows

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
  void snapshot(RelayStats& stats) const { OUTBOX_STAT_COPY(OUTBOX_RELAY_STATS, *this, stats); }
};

}  // namespace outbox::detail
