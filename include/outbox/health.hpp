#pragma once
// What a long-running part (relay, consumer) is doing right now, for probes, dashboards and logs.

#include <string_view>

namespace outbox {

enum class Health {
  starting,
  running,               // working normally (also when idle)
  database_unavailable,  // PostgreSQL unreachable or failing: reconnecting with backoff
  broker_unavailable,    // the broker refuses or cannot be reached: retrying with backoff
  effect_failing,        // consumer only: the effect throws; the batch is retried with backoff
  stopped,
};

[[nodiscard]] std::string_view to_string(Health health) noexcept;

}  // namespace outbox
