#include "relay_stats_format.hpp"

#include <fmt/format.h>

namespace outbox::cli {

std::string relay_stats_text(const std::string& relay_id, const RelayStats& s) {
  return fmt::format(
      "relay {}: health {}, published {}, failed {}, fenced {}, quarantined {}, in flight {} ({} "
      "bytes), reconnects {}, claim statements {}, mark statements {}{}",
      relay_id, to_string(s.health), s.published, s.failed, s.fenced, s.quarantined, s.in_flight,
      s.in_flight_bytes, s.reconnects, s.claim_queries, s.mark_queries,
      s.last_error.empty()
          ? ""
          : fmt::format(", last error {} s ago: {}",
                        std::chrono::duration_cast<std::chrono::seconds>(s.last_error_age).count(),
                        s.last_error));
}

nlohmann::json relay_stats_json(const std::string& relay_id, const RelayStats& s) {
  const bool had_error = !s.last_error.empty();
  return {{"relay_id", relay_id},
          {"health", std::string(to_string(s.health))},
          {"claimed", s.claimed},
          {"published", s.published},
          {"failed", s.failed},
          {"fenced", s.fenced},
          {"quarantined", s.quarantined},
          {"claim_queries", s.claim_queries},
          {"mark_queries", s.mark_queries},
          {"successors", s.successors},
          {"in_flight", s.in_flight},
          {"in_flight_bytes", s.in_flight_bytes},
          {"reconnects", s.reconnects},
          {"last_error", had_error ? nlohmann::json(s.last_error) : nlohmann::json(nullptr)},
          {"last_error_age_ms",
           had_error ? nlohmann::json(s.last_error_age.count()) : nlohmann::json(nullptr)}};
}

}  // namespace outbox::cli
