#include "common/health_board.hpp"

#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/duration.hpp"

namespace outbox {

std::string_view to_string(Health health) noexcept {
  switch (health) {
    case Health::starting:
      return "starting";
    case Health::running:
      return "running";
    case Health::database_unavailable:
      return "database_unavailable";
    case Health::broker_unavailable:
      return "broker_unavailable";
    case Health::effect_failing:
      return "effect_failing";
    case Health::partition_stopped:
      return "partition_stopped";
    case Health::stopped:
      return "stopped";
  }
  return "unknown";
}

namespace detail {

void HealthBoard::set(Health health, const std::string& error) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  if (!error.empty()) {
    last_error_ = error;
    last_error_at_ = now;
  }
  if (health == health_) return;
  const auto lasted = std::chrono::duration_cast<std::chrono::milliseconds>(now - since_);
  const bool healthy =
      health == Health::running || health == Health::starting || health == Health::stopped;
  if (healthy) {
    // "for 4m4s", not "for 244150 ms"; under 10 s in ms, as a start-up is measured.
    log().info("{}: {} (was {} for {})", component_, to_string(health), to_string(health_),
               lasted < std::chrono::seconds(10)
                   ? std::to_string(lasted.count()) + " ms"
                   : format_duration(std::chrono::duration_cast<std::chrono::seconds>(lasted)));
  } else {
    // Errors quote values from the database and the broker (a key in a constraint's detail).
    log().warn("{}: {}: {}", component_, to_string(health), printable(error));
  }
  health_ = health;
  since_ = now;
}

Health HealthBoard::health() const {
  std::lock_guard lock(mutex_);
  return health_;
}

std::pair<Health, std::string> HealthBoard::snapshot() const {
  std::lock_guard lock(mutex_);
  return {health_, last_error_};
}

std::chrono::milliseconds HealthBoard::last_error_age() const {
  std::lock_guard lock(mutex_);
  if (last_error_.empty()) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               last_error_at_);
}

std::string HealthBoard::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace detail
}  // namespace outbox
