// `outbox-dev bench`: answer, what waiting for publication (outbox/wait_published.hpp) costs a
// request. One client commits the workload's transaction with one event in a closed loop, first
// answering at COMMIT, then answering only once wait_published saw the event published, while a
// relay runs. Per request: the commit, the wait, their sum; requests/s both ways; polls per wait.

#include <fmt/format.h>

#include "bench_clients.hpp"
#include "bench_processes.hpp"
#include "bench_scenarios.hpp"
#include "outbox/wait_published.hpp"

namespace outbox::cli::bench {

using nlohmann::json;

namespace {

json figures(const Percentiles& p) {
  return {{"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"max", p.max}};
}

}  // namespace

json bench_answer(const Setup& setup, RelaySource source) {
  const bool cdc = source == RelaySource::cdc;
  const SchemaName schema = setup.fresh_schema(cdc ? "bench_answer_cdc" : "bench_answer");
  if (cdc) setup.create_slot(schema);
  Child relay(setup.relay_args(schema, false, 0, source),
              (setup.out / (cdc ? "relay-answer-cdc.log" : "relay-answer.log")).string());
  std::atomic<std::int64_t> next_order{1};
  const double seconds = setup.options.seconds;
  auto waiter = setup.connect();
  std::vector<double> waits_ms;
  std::uint64_t polls = 0;
  std::uint64_t not_published = 0;
  const auto wait = [&](const EventId& id, double) {
    const auto begun = Clock::now();
    const PublishWait w = wait_published(waiter.get(), schema, std::vector{id});
    waits_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - begun).count());
    polls += w.polls;
    if (!w.all_published()) ++not_published;
  };
  // Warm up (connections, plans, the topic's metadata), then the two ways, one after the other.
  run_clients(setup, schema, true, 1, 1.0, 0, next_order, wait);
  waits_ms.clear();
  polls = 0;
  const TxResult at_commit = run_clients(setup, schema, true, 1, seconds, 0, next_order);
  const TxResult waited = run_clients(setup, schema, true, 1, seconds, 0, next_order, wait);
  relay.stop();
  setup.drop_schema(schema);
  std::vector<double> answers;
  for (std::size_t i = 0; i < waited.latencies_ms.size() && i < waits_ms.size(); ++i) {
    answers.push_back(waited.latencies_ms[i] + waits_ms[i]);
  }
  const double requests = static_cast<double>(waits_ms.size());
  const json result = {{"scenario", "answer"},
                       {"source", source_name(source)},
                       {"requests_per_s_at_commit", at_commit.rate()},
                       {"requests_per_s_after_publish", waited.rate()},
                       {"commit_ms", figures(percentiles(at_commit.latencies_ms))},
                       {"wait_ms", figures(percentiles(waits_ms))},
                       {"answer_after_publish_ms", figures(percentiles(answers))},
                       {"polls_per_wait", requests > 0 ? static_cast<double>(polls) / requests : 0},
                       {"not_published_in_5s", not_published}};
  progress(
      fmt::format("answer ({}): commit p50 {:.2f} ms, after publish p50 {:.2f} ms p99 {:.2f} "
                  "ms, {:.1f} polls per wait; {:.0f} -> {:.0f} requests/s for one client",
                  source_name(source), result["commit_ms"]["p50"].get<double>(),
                  result["answer_after_publish_ms"]["p50"].get<double>(),
                  result["answer_after_publish_ms"]["p99"].get<double>(),
                  result["polls_per_wait"].get<double>(), at_commit.rate(), waited.rate()));
  return result;
}

}  // namespace outbox::cli::bench
