// `outbox-dev bench`: what outbox costs a writer, how fast it drains a backlog, how soon an event
// reaches the broker — each measured next to the machine's own ceiling in the same run. The
// scenarios are in bench_scenarios.hpp; this file has the flags and runs the chosen scenarios in
// order on one PostgreSQL and one Kafka (embedded unless --db / --kafka-brokers).

#include "bench.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <regex>

#include "bench_report.hpp"
#include "bench_scenarios.hpp"
#include "cli/command.hpp"
#include "outbox/error.hpp"
#include "outbox/testing/http_receiver.hpp"
#include "outbox/testing/nats_server.hpp"
#include "outbox/testing/rabbitmq_server.hpp"
#include "outbox/testing/redis_server.hpp"
#include "servers.hpp"
#include "svg_plot.hpp"

namespace outbox::cli::bench {
namespace {

using nlohmann::json;

bool wanted(const BenchOptions& o, const std::string& scenario) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), scenario) != o.only.end();
}

void check(const BenchOptions& options) {
  if (options.events < 1 || options.aggregates < 1 || options.clients < 1 || options.seconds <= 0) {
    throw InvalidArgument(
        "bench: --events, --aggregates, --clients and --seconds must be positive");
  }
  for (const std::string& s : options.only) {
    if (s != "producer" && s != "ceiling" && s != "drain" && s != "table-less" && s != "live" &&
        s != "answer" && s != "ack") {
      throw InvalidArgument("bench: unknown scenario \"" + s +
                            "\"; use producer, ceiling, drain, table-less, live, answer or ack");
    }
  }
  if (options.sources.empty()) throw InvalidArgument("bench: --sources needs polling, cdc or both");
  for (const std::string& s : options.sources) (void)parse_source(s);
}

// The `outbox` program the relays run: --outbox, else the one beside this program.
std::string relay_program(const BenchOptions& options) {
  const std::filesystem::path path =
      options.outbox_program.empty()
          ? std::filesystem::canonical("/proc/self/exe").parent_path() / "outbox"
          : std::filesystem::path(options.outbox_program);
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::is_regular_file(status) ||
      (status.permissions() & std::filesystem::perms::owner_exec) == std::filesystem::perms::none) {
    throw ConfigError("bench: no `outbox` program at " + path.string() +
                      " to run the relays; install it beside outbox-dev or name it with --outbox");
  }
  return std::filesystem::canonical(path).string();
}

std::vector<RelaySource> sources(const BenchOptions& options) {
  std::vector<RelaySource> result;
  for (const std::string& s : options.sources) {
    const RelaySource source = parse_source(s);
    if (std::find(result.begin(), result.end(), source) == result.end()) result.push_back(source);
  }
  return result;
}

// One backlog scenario (ceiling or drain) with each source; its curves go to `chart`, each
// result to `report`, compared with `ceilings` (events/s by source) and, for CDC, with the
// polling figure of the same scenario in this run. Returns its results by source.
std::map<RelaySource, json> run_backlog(const Setup& setup, bool discard,
                                        const std::map<RelaySource, double>& ceilings, Chart& chart,
                                        const std::function<void(json)>& report) {
  std::map<RelaySource, double> rates;
  std::map<RelaySource, json> results;
  for (const RelaySource source : sources(setup.options)) {
    Series s{fmt::format("{}{}", source_name(source),
                         discard ? ": SQL only (sink acknowledges at once)" : ": through Kafka"),
             {}};
    json r = bench_backlog(setup, discard, source, s.points);
    const double rate = r["events_per_s"].get<double>();
    rates[source] = rate;
    if (const auto ceiling = ceilings.find(source); ceiling != ceilings.end()) {
      r["of_ceiling"] = rate / ceiling->second;
    }
    if (const auto polling = rates.find(RelaySource::polling);
        source == RelaySource::cdc && polling != rates.end() && polling->second > 0) {
      r["of_polling"] = rate / polling->second;
    }
    chart.series.push_back(std::move(s));
    report(r);
    results[source] = r;
  }
  return results;
}

// ceiling and drain, each a backlog drained by relay processes; their curves in one plot.
void run_backlogs(const Setup& setup, const std::function<void(json)>& report) {
  Chart throughput{"Backlog drain: events published per second",
                   "seconds since the relay started",
                   "events/s",
                   false,
                   {}};
  std::map<RelaySource, double> ceilings;
  if (wanted(setup.options, "ceiling")) {
    for (const auto& [source, r] : run_backlog(setup, true, {}, throughput, report)) {
      ceilings[source] = r["events_per_s"].get<double>();
    }
  }
  std::map<RelaySource, json> drains;
  if (wanted(setup.options, "drain"))
    drains = run_backlog(setup, false, ceilings, throughput, report);
  const auto all = sources(setup.options);
  if (wanted(setup.options, "table-less") &&
      std::find(all.begin(), all.end(), RelaySource::cdc) != all.end()) {
    Series s{"cdc: table-less events through Kafka", {}};
    json r = bench_table_less(setup, s.points);
    // Against the polling drain of the same backlog in this run (issue 29's targets).
    if (const auto polling = drains.find(RelaySource::polling); polling != drains.end()) {
      const json& p = polling->second;
      r["of_polling"] = r["events_per_s"].get<double>() / p["events_per_s"].get<double>();
      if (r["relay_side_cpu_s_per_10k"].is_number() && p["relay_side_cpu_s_per_10k"].is_number()) {
        r["cpu_of_polling"] = r["relay_side_cpu_s_per_10k"].get<double>() /
                              p["relay_side_cpu_s_per_10k"].get<double>();
      }
    }
    throughput.series.push_back(std::move(s));
    report(r);
  }
  if (!throughput.series.empty()) {
    write_svg((setup.out / "drain-throughput.svg").string(), throughput);
  }
}

int run_bench(const BenchOptions& options) {
  check(options);
  const std::string relay_binary = relay_program(options);
  spdlog::set_level(spdlog::level::warn);
  std::filesystem::create_directories(options.out_dir);
  // Sized as a tuned server would be (a quarter of the memory is the usual advice), not at
  // initdb's 128MB: a backlog of 1,000,000 events with the versions the relay leaves is ~1 GB.
  EmbeddedPostgresOptions pg_options;
  pg_options.shared_buffers = options.shared_buffers;
  Servers servers(options.database_url, options.kafka_brokers, pg_options, 1,
                  [](const std::string& text) { progress(text); });
  // With --sink http the relays deliver to a receiver in this process, deduplicating by
  // Idempotency-Key and keeping counts only.
  std::optional<HttpReceiver> receiver;
  if (options.sink == "http") receiver.emplace(HttpReceiver::Options{.keep_requests = false});
  std::optional<NatsServer> nats;  // with --sink nats: Debian's nats-server, file storage
  if (options.sink == "nats") nats.emplace();
  std::optional<RabbitMqServer> rabbitmq;  // with --sink rabbitmq: a rabbitmq-server node
  if (options.sink == "rabbitmq") rabbitmq.emplace();
  std::optional<RedisServer> redis;  // with --sink redis: Debian's redis-server, AOF always
  if (options.sink == "redis") redis.emplace();
  const Setup setup{options,
                    servers.database_url(),
                    servers.brokers(),
                    relay_binary,
                    options.out_dir,
                    servers.kafka(),
                    receiver ? receiver->url() : "",
                    nats ? nats->url() : "",
                    rabbitmq ? &*rabbitmq : nullptr,
                    redis ? redis->url() : "",
                    nats       ? nats->process_group()
                    : rabbitmq ? rabbitmq->process_group()
                    : redis    ? redis->process_group()
                               : 0};
  std::vector<json> results;
  auto report = [&](json r) {
    std::cout << r.dump() << std::endl;
    results.push_back(std::move(r));
  };
  const json about = machine(setup);
  std::cout << about.dump() << std::endl;

  std::optional<double> producers_alone;
  if (wanted(options, "producer")) {
    json r = bench_producer(setup);
    producers_alone = r["with_event_tx_per_s"].get<double>();
    report(r);
  }
  run_backlogs(setup, report);
  if (wanted(options, "live")) {
    Chart latency{"Commit to broker ack (upper bound: published_at of the mark)",
                  "latency, ms (log scale)",
                  "percent of events at or below",
                  true,
                  {}};
    for (const RelaySource source : sources(options)) {
      bench_live(setup, source, producers_alone, report, latency);
    }
    write_svg((setup.out / "live-latency.svg").string(), latency);
  }
  if (wanted(options, "answer")) {
    for (const RelaySource source : sources(options)) report(bench_answer(setup, source));
  }
  if (wanted(options, "ack") && options.sink == "kafka") report(bench_ack(setup));
  finish_report(options, results, about);
  return 0;
}

void add_workload_flags(CLI::App* bench, BenchOptions& options) {
  bench->add_option("--events", options.events, "backlog size for ceiling and drain")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}))
      ->capture_default_str();
  bench->add_option("--aggregates", options.aggregates, "aggregates in the backlog")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  bench->add_option("--payload-bytes", options.payload_bytes, "approximate payload size")
      ->check(CLI::Range(80, 1000000))
      ->capture_default_str();
  bench
      ->add_option(
          "--shared-buffers", options.shared_buffers,
          "the embedded PostgreSQL's shared_buffers (a tuned server's, not initdb's 128MB)")
      ->check([](const std::string& v) {
        return std::regex_match(v, std::regex("[0-9]+(kB|MB|GB|TB)"))
                   ? std::string()
                   : "--shared-buffers takes a size such as 128MB or 1GB, not \"" + v + "\"";
      })
      ->capture_default_str();
  bench
      ->add_option("--kafka-property", options.kafka_properties,
                   "librdkafka property key=value for the relays (e.g. linger.ms=1)")
      ->check([](const std::string& v) {
        return v.find('=') == std::string::npos || v.front() == '='
                   ? "--kafka-property \"" + v + "\": expected key=value, e.g. linger.ms=1"
                   : std::string();
      });
  bench->add_option("--clients", options.clients, "producer connections")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  bench->add_option("--seconds", options.seconds, "per producer comparison and live rate")
      ->check(CLI::Range(0.5, 3600.0))
      ->capture_default_str();
  bench->add_option("--rates", options.rates, "live offered rates (events/s); max follows")
      ->delimiter(',')
      ->check(CLI::Range(1, 10000000));
}

}  // namespace
}  // namespace outbox::cli::bench

namespace outbox::cli {

void register_bench(Commands& commands) {
  const auto [bench, options] = commands.add(
      "bench",
      "measure producer overhead, backlog drain and commit→ack latency (see docs/PERFORMANCE.md)",
      bench::run_bench);
  bench->add_option("--db", options->database_url,
                    "use this database instead of an embedded one (schemas bench_* are reset)");
  bench->add_option("--kafka-brokers", options->kafka_brokers,
                    "use these brokers instead of the embedded mock cluster");
  bench::add_workload_flags(bench, *options);
  bench->add_option("--relays", options->relays, "relay processes for ceiling and drain")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  bench->add_option("--batch-size", options->batch_size, "relay rows per claim")
      ->check(CLI::Range(1, 100000));
  bench->add_option("--max-in-flight", options->max_in_flight, "relay send window")
      ->check(CLI::Range(1, 1000000));
  bench->add_flag("--durable-marks", options->durable_marks,
                  "relays commit marks synchronously (relay --durable-marks)");
  bench
      ->add_option("--sink", options->sink,
                   "the relays' destination: kafka; nats (an embedded nats-server with JetStream, "
                   "file storage); rabbitmq (an embedded rabbitmq-server node, a quorum queue); "
                   "redis (an embedded redis-server, appendfsync always); "
                   "or http (a webhook receiver in this process "
                   "that deduplicates by Idempotency-Key; ceiling and drain, live)")
      ->check(CLI::IsMember({"kafka", "nats", "rabbitmq", "redis", "http"}))
      ->capture_default_str();
  bench
      ->add_option("--only", options->only,
                   "producer, ceiling, drain, table-less (with the cdc source), live, answer, "
                   "ack (Kafka) (comma list)")
      ->delimiter(',');
  bench
      ->add_option("--cdc-shards", options->cdc_shards,
                   "streams of the CDC relay (relay --shards): aggregates split over that many "
                   "slots")
      ->check(CLI::Range(1U, kMaxShards))
      ->capture_default_str();
  bench
      ->add_option("--sources", options->sources,
                   "relay sources for ceiling, drain and live, each in turn: polling, cdc "
                   "(one CDC relay: only one streams from a slot)")
      ->delimiter(',')
      ->check(CLI::IsMember({"polling", "cdc"}))
      ->capture_default_str();
  bench->add_option("--outbox", options->outbox_program,
                    "the outbox program the relays run (default: the one beside outbox-dev)");
  bench->add_option("--out", options->out_dir, "folder for results.json, plots, relay logs")
      ->capture_default_str();
}

}  // namespace outbox::cli
