// The samples of the relay's statistics lists (outbox/relay.hpp, outbox/metrics.hpp).

#include "common/stat_list.hpp"
#include "outbox/metrics.hpp"
#include "outbox/relay.hpp"

namespace outbox {

std::vector<StatSample> stat_samples(const RelayStats& stats) {
  std::vector<StatSample> samples = OUTBOX_STAT_SAMPLES(OUTBOX_RELAY_STATS, stats, detail::kPlain);
  samples.insert(samples.end(), stats.sink.begin(), stats.sink.end());
  return samples;
}

std::vector<StatSample> stat_samples(const AggregateTypeCounts& counts) {
  return OUTBOX_STAT_SAMPLES(OUTBOX_AGGREGATE_TYPE_COUNTS, counts, detail::kPlain);
}

}  // namespace outbox
