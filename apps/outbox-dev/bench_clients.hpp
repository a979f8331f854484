#pragma once
// `outbox-dev bench`: producer clients. Each commits the workload's business transaction (an order
// and its customer's count), with or without one event, from a connection of its own.

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench.hpp"
#include "outbox/event.hpp"

namespace outbox::cli::bench {

struct TxResult {
  std::uint64_t transactions = 0;
  double seconds = 0;
  std::vector<double> latencies_ms;
  [[nodiscard]] double rate() const {
    return seconds > 0 ? static_cast<double>(transactions) / seconds : 0;
  }
};

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0, max = 0;
};
Percentiles percentiles(std::vector<double> values);

// `clients` threads, each with its own connection, for `seconds`; closed loop unless `rate` > 0,
// then each client keeps its share of an open-loop schedule (late transactions go at once).
// `on_commit(event_id, wall time)` sees every committed event. `table_less`: the events go as
// logical decoding messages (ProducerOptions::table_less), not rows.
TxResult run_clients(const Setup& setup, const SchemaName& schema, bool with_event, int clients,
                     double seconds, double rate, std::atomic<std::int64_t>& next_order,
                     const std::function<void(const EventId&, double)>& on_commit = {},
                     bool table_less = false);

}  // namespace outbox::cli::bench
