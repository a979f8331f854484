#pragma once
// Plain snapshots of what the relay and the consumer measure, read from any thread. The
// outbox::observe target (outbox/observe.hpp) serves them in Prometheus's text format; an
// application with its own metrics system can read them directly (Relay::metrics()).

#include <cstdint>
#include <string>
#include <vector>

namespace outbox {

// A histogram's state: `counts[i]` observations were <= upper_bounds[i] and above the bound
// before it; counts has one entry more than upper_bounds, for the observations above the last.
struct HistogramSnapshot {
  std::vector<double> upper_bounds;
  std::vector<std::uint64_t> counts;
  std::uint64_t count = 0;  // every observation
  double sum = 0;           // of every observation
};

// What the relay counted for the events of one aggregate type.
struct AggregateTypeCounts {
  std::uint64_t published = 0;    // recorded published (marked, or done: table-less)
  std::uint64_t failed = 0;       // sends that failed or had an unknown outcome
  std::uint64_t retried = 0;      // sends of an event that failed before
  std::uint64_t quarantined = 0;  // set aside for an operator
  std::uint64_t fenced = 0;       // outcomes refused: the row was no longer this relay's
};

// Aggregate types are producers' data: the first kMaxAggregateTypeLabels distinct ones are
// counted each under its name, the rest together under kOtherAggregateTypes, so a careless or
// hostile producer cannot grow a relay's memory or a Prometheus server's series without bound.
inline constexpr std::size_t kMaxAggregateTypeLabels = 100;
inline constexpr const char* kOtherAggregateTypes = "_other";

}  // namespace outbox
