#include "sinks/cloudevents.hpp"

#include <fmt/format.h>

#include <chrono>

#include "common/timestamp.hpp"

namespace outbox::detail {

std::vector<std::pair<std::string, std::string>> cloudevents_attributes(const Event& event,
                                                                        const std::string& source) {
  return {{"specversion", "1.0"},
          {"id", event.event_id.to_string()},
          {"source", source},
          {"type", event.event_type},
          {"subject", event.aggregate_id},
          {"time", rfc3339(event.occurred_at)},
          {"partitionkey", event.aggregate_id},
          {"aggregatetype", event.aggregate_type},
          {"aggregatesequence", std::to_string(event.aggregate_sequence)},
          {"schemaversion", std::to_string(event.schema_version)}};
}

std::string rfc3339(std::string_view timestamptz) {
  const auto at = parse_timestamptz(timestamptz);
  if (!at) return std::string(timestamptz);
  const auto micros = std::chrono::floor<std::chrono::microseconds>(*at);
  const auto days = std::chrono::floor<std::chrono::days>(micros);
  const std::chrono::year_month_day date{days};
  const std::chrono::hh_mm_ss time{micros - days};
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                     time.hours().count(), time.minutes().count(), time.seconds().count(),
                     time.subseconds().count());
}

}  // namespace outbox::detail
