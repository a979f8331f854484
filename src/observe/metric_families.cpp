#include "observe/metric_families.hpp"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <limits>
#include <sstream>
#include <string_view>

#include "common/printable.hpp"

namespace outbox::observe {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// The family named `name` in `out`, added when missing (several consumers share a family).
MetricFamily& family(Families& out, const std::string& name, const std::string& help,
                     MetricType type) {
  for (MetricFamily& f : out) {
    if (f.name == name) return f;
  }
  out.push_back(MetricFamily{name, help, type, {}});
  return out.back();
}

// One sample of a counter or a gauge.
void sample(Families& out, MetricType type, const std::string& name, const std::string& help,
            double value, Labels labels) {
  ClientMetric m;
  m.label = std::move(labels);
  (type == MetricType::Counter ? m.counter.value : m.gauge.value) = value;
  family(out, name, help, type).metric.push_back(std::move(m));
}

void counter(Families& out, const std::string& name, const std::string& help, double value,
             Labels labels = {}) {
  sample(out, MetricType::Counter, name, help, value, std::move(labels));
}

void gauge(Families& out, const std::string& name, const std::string& help, double value,
           Labels labels = {}) {
  sample(out, MetricType::Gauge, name, help, value, std::move(labels));
}

void histogram(Families& out, const std::string& name, const std::string& help,
               const HistogramSnapshot& h, Labels labels) {
  ClientMetric m;
  m.label = std::move(labels);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    m.histogram.bucket.push_back({cumulative, h.upper_bounds[i]});
  }
  // +Inf and _count are one number (read apart from the buckets, relaxed: take the larger).
  const std::uint64_t all = std::max(
      cumulative + (h.counts.size() > h.upper_bounds.size() ? h.counts.back() : 0), h.count);
  m.histogram.sample_count = all;
  m.histogram.sample_sum = h.sum;
  m.histogram.bucket.push_back({all, std::numeric_limits<double>::infinity()});
  family(out, name, help, MetricType::Histogram).metric.push_back(std::move(m));
}

// Label values come from producers' data: escaped as outbox prints such values everywhere
// (common/printable.hpp: controls and bytes that are not UTF-8 escaped, backslashes doubled).
std::string label_value(std::string_view value) {
  // Always escaped, never cut: distinct types stay distinct labels ("a<ESC>" and the text
  // "a\\x1b" would otherwise meet), and a plain type reads as itself.
  return detail::printable(value, value.size());
}

constexpr std::array kRelayStates = {Health::starting, Health::running,
                                     Health::database_unavailable, Health::broker_unavailable,
                                     Health::stopped};
constexpr std::array kConsumerStates = {Health::starting,
                                        Health::running,
                                        Health::database_unavailable,
                                        Health::broker_unavailable,
                                        Health::effect_failing,
                                        Health::partition_stopped,
                                        Health::stopped};

template <std::size_t N>
void health(Families& out, const std::string& name, const std::string& help, Health current,
            const std::array<Health, N>& states, const Labels& labels) {
  for (const Health state : states) {
    Labels with_state = labels;
    with_state.push_back({"state", std::string(to_string(state))});
    gauge(out, name, help, state == current ? 1 : 0, std::move(with_state));
  }
}

}  // namespace

void add_build_info(Families& out) {
  gauge(out, "outbox_build_info", "Always 1; the outbox version that serves these metrics.", 1,
        {{"version", OUTBOX_VERSION}});
}

namespace {

// Each sample under its list entry's name and help.
void add_samples(Families& out, const std::vector<StatSample>& samples, const Labels& labels) {
  for (const StatSample& sample : samples) {
    const StatDef& def = *sample.def;
    // Absent (not -1) while unknown, so that no alert reads -1 as a value.
    if (def.metric.empty() || !sample.known()) continue;
    const std::string name(def.metric);
    const std::string help(def.help);
    const double value = static_cast<double>(sample.value) * def.scale;
    if (def.kind == StatKind::counter) {
      counter(out, name, help, value, labels);
    } else {
      gauge(out, name, help, value, labels);
    }
  }
}

}  // namespace

void add_relay(Families& out, const RelayMetrics& metrics, const std::string& shard) {
  const Labels base = shard.empty() ? Labels{} : Labels{{"shard", shard}};
  const RelayStats& s = metrics.stats;
  add_samples(out, stat_samples(s), base);
  for (const auto& [type, counts] : metrics.by_aggregate_type) {
    Labels labels = base;
    labels.push_back({"aggregate_type", label_value(type)});
    add_samples(out, stat_samples(counts), labels);
  }
  histogram(out, "outbox_relay_commit_to_ack_seconds",
            "From the event's transaction (occurred_at, PostgreSQL's clock) to the broker's ack.",
            metrics.commit_to_ack, base);
  histogram(out, "outbox_relay_send_to_ack_seconds", "From the send to the broker's ack.",
            metrics.send_to_ack, base);
  histogram(out, "outbox_relay_claim_batch_events", "Rows per claim statement that claimed any.",
            metrics.claim_batch, base);
  health(out, "outbox_relay_health", "1 for the relay's current state, 0 for the others.", s.health,
         kRelayStates, base);
}

void add_consumer(Families& out, const std::string& consumer,
                  const std::vector<StatSample>& samples, Health state) {
  const Labels labels{{"consumer", label_value(consumer)}};
  add_samples(out, samples, labels);
  health(out, "outbox_consumer_health", "1 for the consumer's current state, 0 for the others.",
         state, kConsumerStates, labels);
}

void add_backlog(Families& out, const std::vector<BacklogRow>& rows) {
  const std::vector<BacklogRow> none{BacklogRow{}};
  for (const BacklogRow& row : rows.empty() ? none : rows) {
    const Labels labels =
        rows.empty() ? Labels{} : Labels{{"aggregate_type", label_value(row.aggregate_type)}};
    gauge(out, "outbox_pending_events", "Events waiting to be published, quarantined ones not.",
          row.pending, labels);
    gauge(out, "outbox_oldest_pending_age_seconds",
          "Age of the oldest pending event that is due or was tried (not a delayed one not yet "
          "due, not a quarantined one); 0 when none.",
          row.oldest_pending_age, labels);
    gauge(out, "outbox_quarantined_events", "Events waiting for an operator.", row.quarantined,
          labels);
    gauge(out, "outbox_in_doubt_events",
          "Events sent with no answer to a destination that cannot recognise a repeat, waiting "
          "for `outbox reconcile`.",
          row.in_doubt, labels);
  }
}

void add_relay_sessions(Families& out, const RelaySessionCounts& sessions) {
  constexpr const char* kHelp =
      "Relay sessions in outbox_relays that have not ended, by state: working, waiting (for "
      "work), silent (not seen for 30 s: stalled or cut off).";
  gauge(out, "outbox_relay_sessions", kHelp, sessions.working, {{"state", "working"}});
  gauge(out, "outbox_relay_sessions", kHelp, sessions.waiting, {{"state", "waiting"}});
  gauge(out, "outbox_relay_sessions", kHelp, sessions.silent, {{"state", "silent"}});
}

void add_slots(Families& out, const std::vector<SlotRow>& slots) {
  for (const SlotRow& slot : slots) {
    const Labels labels{{"database", label_value(slot.database)}, {"slot", label_value(slot.name)}};
    gauge(out, "outbox_replication_slot_streamed",
          "1 while a walsender streams the pgoutput slot; 0 while none does (it keeps WAL).",
          slot.streamed ? 1 : 0, labels);
    gauge(out, "outbox_replication_slot_retained_bytes",
          "WAL the slot holds back from recycling, in bytes; -1 once its WAL is gone.",
          slot.retained_bytes, labels);
  }
}

void add_backlog_up(Families& out, bool up, double last_query_seconds) {
  gauge(out, "outbox_backlog_query_up",
        "1 while the backlog query works; 0 while it fails (the backlog gauges are left out).",
        up ? 1 : 0);
  if (last_query_seconds >= 0) {
    gauge(out, "outbox_backlog_query_duration_seconds",
          "How long the last backlog query took; the next one waits at least ten times as long.",
          last_query_seconds);
  }
}

std::string serialize(const Families& families) {
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, families);
  return text.str();
}

}  // namespace outbox::observe
