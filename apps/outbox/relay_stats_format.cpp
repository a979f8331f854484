#include "relay_stats_format.hpp"

#include <fmt/format.h>

namespace outbox::cli {

namespace {

// The slot's part of a CDC relay's line; empty for a polling relay.
std::string slot_text(const RelayStats& s) {
  if (s.slot_standby) return ", standby: another relay streams the slot";
  if (s.polling_fallback) {
    return fmt::format(", slot let go over the WAL budget ({} time(s)): polling", s.slot_released);
  }
  if (s.slot_retained_bytes < 0) return "";
  return fmt::format(", slot holds {} bytes of WAL, lags {} bytes / {} ms{}", s.slot_retained_bytes,
                     s.slot_lag_bytes, s.slot_lag_ms,
                     s.slot_released == 0
                         ? ""
                         : fmt::format(" (let go {} time(s) over the WAL budget)", s.slot_released)) +
         (s.materialized == 0
              ? ""
              : fmt::format(", {} table-less event(s) written to the table", s.materialized)) +
         (s.messages_rejected == 0
              ? ""
              : fmt::format(", {} outbox message(s) rejected (see the log)", s.messages_rejected));
}

nlohmann::json known(std::int64_t value) {
  return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value);
}

}  // namespace

std::string relay_stats_text(const std::string& relay_id, const RelayStats& s) {
  return fmt::format(
      "relay {}: health {}, published {}, failed {}, fenced {}, quarantined {}, in flight {} ({} "
      "bytes), reconnects {}, claim statements {}, mark statements {}{}{}",
      relay_id, to_string(s.health), s.published, s.failed, s.fenced, s.quarantined, s.in_flight,
      s.in_flight_bytes, s.reconnects, s.claim_queries, s.mark_queries, slot_text(s),
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
          {"slot_retained_bytes", known(s.slot_retained_bytes)},
          {"slot_lag_bytes", known(s.slot_lag_bytes)},
          {"slot_lag_ms", known(s.slot_lag_ms)},
          {"polling_fallback", s.polling_fallback},
          {"slot_standby", s.slot_standby},
          {"slot_released", s.slot_released},
          {"materialized", s.materialized},
          {"messages_rejected", s.messages_rejected},
          {"last_error", had_error ? nlohmann::json(s.last_error) : nlohmann::json(nullptr)},
          {"last_error_age_ms",
           had_error ? nlohmann::json(s.last_error_age.count()) : nlohmann::json(nullptr)}};
}

}  // namespace outbox::cli
