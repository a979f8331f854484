#pragma once
// A histogram with fixed bounds: observed by one thread, read by any (relaxed atomics; a reader
// may see a count a moment before its sum). Cumulative counts are made when read.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "outbox/metrics.hpp"

namespace outbox::detail {

class Histogram {
 public:
  static constexpr std::size_t kMaxBounds = 24;

  Histogram(std::initializer_list<double> bounds) : size_(std::min(bounds.size(), kMaxBounds)) {
    std::copy_n(bounds.begin(), size_, bounds_.begin());
  }

  void observe(double value) {
    const std::size_t bucket = static_cast<std::size_t>(
        std::lower_bound(bounds_.begin(), bounds_.begin() + size_, value) - bounds_.begin());
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    // One writer: a load and a store add without a compare-and-swap loop.
    sum_.store(sum_.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
  }

  [[nodiscard]] HistogramSnapshot snapshot() const {
    HistogramSnapshot s;
    s.upper_bounds.assign(bounds_.begin(), bounds_.begin() + size_);
    for (std::size_t i = 0; i <= size_; ++i) {
      s.counts.push_back(counts_[i].load(std::memory_order_relaxed));
    }
    s.count = count_.load(std::memory_order_relaxed);
    s.sum = sum_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<double, kMaxBounds> bounds_{};
  std::size_t size_;
  std::array<std::atomic<std::uint64_t>, kMaxBounds + 1> counts_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Seconds from a millisecond to five minutes: broker round trips to an outage's backlog.
inline Histogram latency_histogram() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
}

}  // namespace outbox::detail
