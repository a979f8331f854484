#pragma once
// One definition per statistic. A group of statistics (the relay's, a sink's, the consumer's) is
// one list macro: each entry gives a field's name, its kind, its Prometheus name, how the
// one-line text shows it, and its help text. From that list come the snapshot struct's fields
// (OUTBOX_STAT_FIELD), the counters behind them, the Prometheus families, the JSON the CLI
// prints and its text line: a new statistic is one entry, and nothing else changes.
//
// An entry: X(field, kind, show, "prometheus_name", "text phrase with {}", "Help text.")
//   kind  counter | gauge | signed_gauge | optional_gauge | flag (StatKind)
//   show  always | when_set | never (StatShow): whether the text line shows it
//   name  "" when Prometheus does not export it (a total exported by aggregate type, say)
//
// The lists: OUTBOX_RELAY_STATS (outbox/relay.hpp), OUTBOX_AGGREGATE_TYPE_COUNTS
// (outbox/metrics.hpp), OUTBOX_KAFKA_CONSUMER_STATS (outbox/kafka_consumer.hpp), and each sink's
// own (src/kafka/kafka_sink.cpp), which reaches the relay's statistics through Sink::stats().

#include <cstdint>
#include <string_view>
#include <vector>

namespace outbox {

enum class StatKind : std::uint8_t {
  counter,         // only grows (std::uint64_t): a Prometheus counter
  gauge,           // a level (std::uint64_t)
  signed_gauge,    // a level, -1 while unknown (std::int64_t): exported as it is, -1 too
  optional_gauge,  // a level, -1 while unknown (std::int64_t): absent from Prometheus, null in JSON
  flag,            // yes or no (bool): a gauge of 0 or 1
};

enum class StatShow : std::uint8_t {
  always,    // in every text line
  when_set,  // when not zero, not unknown, not false
  never,
};

struct StatDef {
  std::string_view key;  // the field's name: the JSON key
  StatKind kind;
  StatShow show;
  std::string_view metric;  // the Prometheus name; empty: not exported
  std::string_view text;    // the text line's phrase, "{}" standing for the value
  std::string_view help;
  double scale = 1;  // Prometheus value = value x scale (a "_ms" field exported in seconds)
};

// One statistic's value now (bool and unsigned values as std::int64_t).
struct StatSample {
  const StatDef* def = nullptr;
  std::int64_t value = 0;

  // Whether the text line shows it, and what JSON should hold: unknown optional gauges are null.
  [[nodiscard]] bool known() const { return def->kind != StatKind::optional_gauge || value >= 0; }
  [[nodiscard]] bool set() const { return known() && value != 0; }
};

template <StatKind K>
struct StatType {
  using type = std::uint64_t;
  static constexpr type initial = 0;
};
template <>
struct StatType<StatKind::signed_gauge> {
  using type = std::int64_t;
  static constexpr type initial = -1;
};
template <>
struct StatType<StatKind::optional_gauge> {
  using type = std::int64_t;
  static constexpr type initial = -1;
};
template <>
struct StatType<StatKind::flag> {
  using type = bool;
  static constexpr type initial = false;
};

}  // namespace outbox

// A list entry as a plain struct field, at its initial value.
#define OUTBOX_STAT_FIELD(field, kind, show, metric, text, help) \
  ::outbox::StatType<::outbox::StatKind::kind>::type field =     \
      ::outbox::StatType<::outbox::StatKind::kind>::initial;
// A list entry as its StatDef (scale: a field named *_ms is exported in seconds).
#define OUTBOX_STAT_DEF(field, kind, show, metric, text, help) \
  ::outbox::StatDef{#field,                                    \
                    ::outbox::StatKind::kind,                  \
                    ::outbox::StatShow::show,                  \
                    metric,                                    \
                    text,                                      \
                    help,                                      \
                    ::outbox::detail::stat_scale(#field)},

namespace outbox::detail {
constexpr double stat_scale(std::string_view field) {
  return field.size() > 3 && field.substr(field.size() - 3) == "_ms" ? 0.001 : 1.0;
}
}  // namespace outbox::detail
