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

void add_relay(Families& out, const RelayMetrics& metrics, const std::string& shard) {
  const Labels base = shard.empty() ? Labels{} : Labels{{"shard", shard}};
  const RelayStats& s = metrics.stats;
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  counter(out, "outbox_relay_events_claimed_total",
          "Rows the relay claimed (a retried row counts each time).", d(s.claimed), base);
  for (const auto& [type, counts] : metrics.by_aggregate_type) {
    Labels labels = base;
    labels.push_back({"aggregate_type", label_value(type)});
    counter(out, "outbox_relay_events_published_total",
            "Events recorded published after the broker's ack.", d(counts.published), labels);
    counter(out, "outbox_relay_events_failed_total",
            "Sends that failed or had an unknown outcome (rescheduled, or quarantined).",
            d(counts.failed), labels);
    counter(out, "outbox_relay_events_retried_total", "Sends of an event that failed before.",
            d(counts.retried), labels);
    counter(out, "outbox_relay_events_quarantined_total",
            "Events set aside for an operator (permanent failure or attempt limit).",
            d(counts.quarantined), labels);
    counter(out, "outbox_relay_fenced_writes_total",
            "Outcomes not written because the row was no longer this relay's (re-claimed after "
            "its lease expired, or skipped): a duplicate publish is possible.",
            d(counts.fenced), labels);
  }
  counter(out, "outbox_relay_leases_taken_over_total",
          "Rows claimed whose previous lease had expired or whose relay session had ended.",
          d(s.leases_taken_over), base);
  counter(out, "outbox_relay_reconnects_total",
          "Times the relay got PostgreSQL back after losing it.", d(s.reconnects), base);
  counter(out, "outbox_relay_events_materialized_total",
          "Table-less events the relay wrote to the table to publish them from there.",
          d(s.materialized), base);
  counter(out, "outbox_relay_cdc_messages_rejected_total",
          "Logical decoding messages with the outbox prefix not published: not proven to come "
          "from a producer (forged), unreadable, or table-less at a relay without --table-less.",
          d(s.messages_rejected), base);
  counter(out, "outbox_relay_slot_releases_total",
          "Times the relay let its replication slot go over its WAL budget.", d(s.slot_released),
          base);
  histogram(out, "outbox_relay_commit_to_ack_seconds",
            "From the event's transaction (occurred_at, PostgreSQL's clock) to the broker's ack.",
            metrics.commit_to_ack, base);
  histogram(out, "outbox_relay_send_to_ack_seconds", "From the send to the broker's ack.",
            metrics.send_to_ack, base);
  histogram(out, "outbox_relay_claim_batch_events", "Rows per claim statement that claimed any.",
            metrics.claim_batch, base);
  gauge(out, "outbox_relay_in_flight_events", "Events sent and not yet reported by the broker.",
        d(s.in_flight), base);
  gauge(out, "outbox_relay_in_flight_bytes", "Payload and header bytes of the events in flight.",
        d(s.in_flight_bytes), base);
  health(out, "outbox_relay_health", "1 for the relay's current state, 0 for the others.", s.health,
         kRelayStates, base);
  if (s.slot_lag_bytes >= 0 || s.slot_retained_bytes >= 0 || s.polling_fallback || s.slot_standby ||
      s.slot_released > 0) {
    // Change data capture: absent (not -1) while unknown, so no alert reads -1 as a value.
    if (s.slot_retained_bytes >= 0) {
      gauge(out, "outbox_relay_slot_retained_bytes",
            "WAL the relay's replication slot holds back (current position - restart_lsn).",
            static_cast<double>(s.slot_retained_bytes), base);
    }
    if (s.slot_lag_bytes >= 0) {
      gauge(out, "outbox_relay_slot_lag_bytes",
            "WAL not yet confirmed by the relay (current position - confirmed_flush_lsn).",
            static_cast<double>(s.slot_lag_bytes), base);
    }
    if (s.slot_lag_ms >= 0) {
      gauge(out, "outbox_relay_slot_lag_seconds",
            "How old the oldest committed event the stream still owes may be.",
            static_cast<double>(s.slot_lag_ms) / 1000.0, base);
    }
  }
  gauge(out, "outbox_relay_polling_fallback",
        "1 while a CDC relay publishes by polling after letting its slot go over the WAL budget.",
        s.polling_fallback ? 1 : 0, base);
  gauge(out, "outbox_relay_slot_standby",
        "1 while a CDC relay waits as standby for a slot another relay streams.",
        s.slot_standby ? 1 : 0, base);
}

void add_consumer(Families& out, const std::string& consumer, const KafkaConsumerStats& s) {
  const Labels labels{{"consumer", label_value(consumer)}};
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  counter(out, "outbox_consumer_messages_received_total", "Messages taken from the broker.",
          d(s.received), labels);
  counter(out, "outbox_consumer_events_applied_total",
          "Events whose effect committed with their inbox row.", d(s.applied), labels);
  counter(out, "outbox_consumer_duplicates_suppressed_total",
          "Deliveries of events the inbox had already applied (no effect run).", d(s.duplicates),
          labels);
  counter(out, "outbox_consumer_messages_rejected_total",
          "Messages without a valid outbox event id (skipped, logged).", d(s.rejected), labels);
  counter(out, "outbox_consumer_effect_failures_total",
          "Batches rolled back because the effect threw.", d(s.effect_failures), labels);
  counter(out, "outbox_consumer_failed_batches_total",
          "Batches rolled back and rewound (effect or database failed).", d(s.failed_batches),
          labels);
  counter(out, "outbox_consumer_reconnects_total",
          "New PostgreSQL connections or Kafka clients after a failure.", d(s.reconnects), labels);
  counter(out, "outbox_consumer_offset_gaps_total",
          "Partitions whose next message was gone from the broker (the consumer fell behind the "
          "topic's retention): stopped or skipped as on_offset_gap says.",
          d(s.offset_gaps), labels);
  counter(out, "outbox_consumer_offset_gap_messages_total",
          "Messages in those gaps: never applied by this consumer.", d(s.offset_gap_messages),
          labels);
  gauge(out, "outbox_consumer_partitions_stopped",
        "Partitions stopped at an offset gap (on_offset_gap=stop) until the consumer restarts.",
        static_cast<double>(s.partitions_stopped), labels);
  gauge(out, "outbox_consumer_lag_messages",
        "Messages on the assigned partitions not yet taken; -1 while unknown.",
        static_cast<double>(s.lag_messages), labels);
  health(out, "outbox_consumer_health", "1 for the consumer's current state, 0 for the others.",
         s.health, kConsumerStates, labels);
}

void add_backlog(Families& out, const std::vector<BacklogRow>& rows) {
  for (const BacklogRow& row : rows) {
    const Labels labels{{"aggregate_type", label_value(row.aggregate_type)}};
    gauge(out, "outbox_pending_events", "Events waiting to be published, quarantined ones not.",
          row.pending, labels);
    gauge(out, "outbox_oldest_pending_age_seconds",
          "Age of the oldest pending event that is due or was tried (not a delayed one not yet "
          "due, not a quarantined one); 0 when none.",
          row.oldest_pending_age, labels);
    gauge(out, "outbox_quarantined_events", "Events waiting for an operator.", row.quarantined,
          labels);
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
