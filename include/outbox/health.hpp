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
  // Consumer only: a partition stopped because messages it had not applied are gone from the
  // broker (its committed offset fell behind the topic's retention); the other partitions go on.
  // last_error says which partition, from which offset to which, how many messages.
  partition_stopped,
  stopped,
};

[[nodiscard]] std::string_view to_string(Health health) noexcept;

}  // namespace outbox
