#include "outbox/sink.hpp"

namespace outbox {

const char* to_string(DeliveryOutcome outcome) noexcept {
  switch (outcome) {
    case DeliveryOutcome::published:
      return "published";
    case DeliveryOutcome::retryable_failure:
      return "retryable_failure";
    case DeliveryOutcome::permanent_failure:
      return "permanent_failure";
    case DeliveryOutcome::unknown:
      return "unknown";
    case DeliveryOutcome::in_doubt:
      return "in_doubt";
  }
  return "?";
}

}  // namespace outbox
