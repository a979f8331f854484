#include "relay_stats_format.hpp"

#include <fmt/format.h>

namespace outbox::cli {

namespace {

// The phrase of each sample the line shows (StatShow), in list order.
std::string phrases(const std::vector<StatSample>& samples) {
  std::string out;
  for (const StatSample& sample : samples) {
    const StatDef& def = *sample.def;
    const bool shown = def.show == StatShow::always
                           ? sample.known()
                           : def.show == StatShow::when_set && sample.set();
    if (!shown || def.text.empty()) continue;
    out += ", ";
    out += fmt::format(fmt::runtime(def.text), sample.value);
  }
  return out;
}

nlohmann::json value(const StatSample& sample) {
  if (!sample.known()) return nullptr;
  if (sample.def->kind == StatKind::flag) return sample.value != 0;
  return sample.value;
}

}  // namespace

std::string relay_stats_text(const std::string& relay_id, const RelayStats& s) {
  return fmt::format(
      "relay {}: health {}{}{}", relay_id, to_string(s.health), phrases(stat_samples(s)),
      s.last_error.empty()
          ? ""
          : fmt::format(", last error {} s ago: {}",
                        std::chrono::duration_cast<std::chrono::seconds>(s.last_error_age).count(),
                        s.last_error));
}

nlohmann::json relay_stats_json(const std::string& relay_id, const RelayStats& s) {
  const bool had_error = !s.last_error.empty();
  nlohmann::json out{{"relay_id", relay_id}, {"health", std::string(to_string(s.health))}};
  for (const StatSample& sample : stat_samples(s))
    out[std::string(sample.def->key)] = value(sample);
  out["last_error"] = had_error ? nlohmann::json(s.last_error) : nlohmann::json(nullptr);
  out["last_error_age_ms"] =
      had_error ? nlohmann::json(s.last_error_age.count()) : nlohmann::json(nullptr);
  return out;
}

}  // namespace outbox::cli
