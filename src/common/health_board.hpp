#pragma once
// The current Health of one component plus the error that caused it; written by the component's
// thread, read from any thread. Logs every change once, so a log shows each outage and recovery.

#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "outbox/health.hpp"

namespace outbox::detail {

class HealthBoard {
 public:
  explicit HealthBoard(std::string component) : component_(std::move(component)) {}

  // Sets the state; `error` says why when the state is not running/starting/stopped.
  void set(Health health, const std::string& error = {});

  [[nodiscard]] Health health() const;
  [[nodiscard]] std::string last_error() const;  // the latest error, kept after recovery
  // Both, read together.
  [[nodiscard]] std::pair<Health, std::string> snapshot() const;
  // How long ago the latest error was set; zero when there was none.
  [[nodiscard]] std::chrono::milliseconds last_error_age() const;

 private:
  const std::string component_;
  mutable std::mutex mutex_;
  Health health_ = Health::starting;
  std::string last_error_;
  std::chrono::steady_clock::time_point last_error_at_{};
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
};

}  // namespace outbox::detail
