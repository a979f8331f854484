#pragma once
// Sinks that wrap a real one to hold back or watch what a relay does, and a polling wait, shared
// by the relay tests.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "outbox/sink.hpp"

namespace outbox::testing {

// Holds the broker's reports back while hold() is on, to place them inside a database outage, or
// to keep a relay's claims in flight.
class HoldingSink final : public Sink {
 public:
  explicit HoldingSink(std::unique_ptr<Sink> inner) : inner_(std::move(inner)) {}
  void send(const Event& event, std::uint64_t ticket) override { inner_->send(event, ticket); }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    inner_->poll(max_wait, held_);
    held_count_.store(held_.size());
    if (holding_.load()) return;
    reports.insert(reports.end(), held_.begin(), held_.end());
    held_.clear();
  }
  [[nodiscard]] std::size_t in_flight() const override { return inner_->in_flight(); }
  [[nodiscard]] std::string describe() const override { return "holding " + inner_->describe(); }
  void release() { holding_.store(false); }
  [[nodiscard]] std::size_t held() const { return held_count_.load(); }

 private:
  std::unique_ptr<Sink> inner_;
  std::vector<DeliveryReport> held_;
  std::atomic<bool> holding_{true};
  std::atomic<std::size_t> held_count_{0};
};

// Counts the payload and header bytes a relay has handed over and not yet had reported: the
// bytes of the rows it holds. Thread-safe reads of the peak.
class ByteCountingSink final : public Sink {
 public:
  explicit ByteCountingSink(std::unique_ptr<Sink> inner) : inner_(std::move(inner)) {}
  void send(const Event& event, std::uint64_t ticket) override {
    const std::uint64_t bytes = event.payload.size() + event.headers.size();
    sizes_[ticket] = bytes;
    held_ += bytes;
    peak_.store(std::max(peak_.load(), held_));
    largest_.store(std::max(largest_.load(), bytes));
    inner_->send(event, ticket);
  }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    const std::size_t before = reports.size();
    inner_->poll(max_wait, reports);
    for (std::size_t i = before; i < reports.size(); ++i) {
      held_ -= sizes_.at(reports[i].ticket);
      sizes_.erase(reports[i].ticket);
    }
  }
  [[nodiscard]] std::size_t in_flight() const override { return inner_->in_flight(); }
  [[nodiscard]] std::string describe() const override { return "counting " + inner_->describe(); }
  // The most bytes held at once, and the largest single row.
  [[nodiscard]] std::uint64_t peak() const { return peak_.load(); }
  [[nodiscard]] std::uint64_t largest() const { return largest_.load(); }

 private:
  std::unique_ptr<Sink> inner_;
  std::map<std::uint64_t, std::uint64_t> sizes_;
  std::uint64_t held_ = 0;
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> largest_{0};
};

template <typename Condition>
bool wait_until(Condition condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace outbox::testing
