#pragma once
// `outbox-dev bench`'s scenarios, all on one PostgreSQL and one Kafka:
//   producer  the same business transaction with and without one enqueued event, alternating
//             rounds from several clients; the ratio of their rates is the overhead.
//   ceiling   a backlog drained by relays whose sink acknowledges at once (`--sink discard`):
//             the claim-and-complete SQL alone, what PostgreSQL allows here.
//   drain     the same backlog drained through the Kafka sink; events/s, CPU, peak RSS.
//   live      producers commit one event per transaction at fixed offered rates and flat out
//             while a relay runs; latency from COMMIT to the row's published_at (set by the mark
//             that follows the broker's ack, so an upper bound of commit→ack).
// ceiling, drain and live run with either relay source (--sources). With `cdc` the backlog is
// written after a CDC relay made its slot and stopped (the slot keeps it: catch-up from WAL), and
// one relay runs, since only one relay streams from a slot (a second waits as a standby).
// Each returns one JSON object of figures (what results.json holds), naming its source.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "svg_plot.hpp"

namespace outbox::cli::bench {

nlohmann::json bench_producer(const Setup& setup);

// ceiling (`discard`) or drain; `curve` gets (seconds since start, events/s) points.
nlohmann::json bench_backlog(const Setup& setup, bool discard, RelaySource source,
                             std::vector<std::pair<double, double>>& curve);

// table-less: the same backlog written as table-less events (no rows) while no relay runs, then
// drained by one `relay --source cdc --table-less` (catch-up from the slot). Its time runs from
// the relay's start to the stats line that counted the last event (lines every 250 ms).
nlohmann::json bench_table_less(const Setup& setup, std::vector<std::pair<double, double>>& curve);

// live at every --rates rate, then max (bracketed by the producers alone, and compared with
// `producer_scenario_per_s` when the producer scenario ran). Each result goes to `report`; each
// rate's latency distribution becomes a series of `latency`.
void bench_live(const Setup& setup, RelaySource source,
                std::optional<double> producer_scenario_per_s,
                const std::function<void(nlohmann::json)>& report, Chart& latency);

// ack: the send→ack hop alone at 1,000 events/s, through a bare librdkafka producer and through
// outbox's Kafka sink with the same settings, alternating rounds (Kafka only).
nlohmann::json bench_ack(const Setup& setup);

// answer: one client's requests answered at COMMIT, then only after wait_published saw the event
// published (outbox/wait_published.hpp), while a relay runs: what the wait costs a request.
nlohmann::json bench_answer(const Setup& setup, RelaySource source);

}  // namespace outbox::cli::bench
