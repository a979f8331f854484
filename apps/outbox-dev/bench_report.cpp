// `outbox-dev bench`: the table, the machine, results.json.

#include "bench_report.hpp"

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>

#include <fstream>
#include <iostream>
#include <thread>

namespace outbox::cli::bench {
namespace {

using nlohmann::json;

std::string number(double value) {
  if (value >= 100) return fmt::format("{:.0f}", value);
  if (value >= 10) return fmt::format("{:.1f}", value);
  return fmt::format("{:.2f}", value);
}

std::string producer_text(const json& r) {
  std::string text = fmt::format(
      "{} clients: {} tx/s without an event (p99 {} ms), {} tx/s with one (p99 {} ms): "
      "overhead {}x",
      r["clients"].get<int>(), number(r["without_event_tx_per_s"]),
      number(r["without_event_p99_ms"]), number(r["with_event_tx_per_s"]),
      number(r["with_event_p99_ms"]), number(r["overhead_ratio"]));
  if (r.contains("table_less_tx_per_s")) {
    text += fmt::format("; table-less {} tx/s (p99 {} ms): overhead {}x",
                        number(r["table_less_tx_per_s"]), number(r["table_less_p99_ms"]),
                        number(r["table_less_overhead_ratio"]));
  }
  return text;
}

// "2 relays", or for CDC "1 relay (one relay streams from a slot)".
std::string relays_text(const json& r) {
  const int relays = r.value("relays", 1);
  std::string text = fmt::format("{} relay{}", relays, relays == 1 ? "" : "s");
  if (r.value("source", "") == "cdc") {
    const int shards = r.value("cdc_shards", 1);
    text += shards == 1 ? " (only one CDC relay streams from a slot)"
                        : fmt::format(" streaming {} shards", shards);
  }
  return text;
}

// "relay-side CPU 0.12 s per 10k events (relay 0.05, PostgreSQL sessions 0.06 of which
// walsender 0.03, broker 0.01)", or the relay process alone where the rest is unknown.
std::string backlog_cpu_text(const json& r) {
  if (!r["relay_side_cpu_s_per_10k"].is_number()) {
    return fmt::format("relay {} CPU s per 10k events", number(r["relay_cpu_s_per_10k"]));
  }
  std::string text =
      fmt::format("relay-side CPU {} s per 10k events (relay {}, PostgreSQL sessions {}",
                  number(r["relay_side_cpu_s_per_10k"]), number(r["relay_cpu_s_per_10k"]),
                  number(r["postgres_sessions_cpu_s_per_10k"]));
  if (r.value("source", "") == "cdc") {
    text += fmt::format(" of which walsender {}", number(r["walsender_cpu_s_per_10k"]));
  }
  if (r["broker_cpu_s_per_10k"].is_number()) {
    text += fmt::format(", broker {}", number(r["broker_cpu_s_per_10k"]));
  }
  return text + ")";
}

std::string backlog_text(const json& r) {
  std::string text =
      fmt::format("{} events in {} s: {} events/s, {}; {}, peak RSS {} MiB",
                  r["events"].get<std::int64_t>(), number(r["seconds"]), number(r["events_per_s"]),
                  relays_text(r), backlog_cpu_text(r), number(r["relay_peak_rss_mib"]));
  if (r.contains("of_ceiling")) {
    text += fmt::format("; {:.0f}% of the ceiling", r["of_ceiling"].get<double>() * 100);
  }
  if (r.contains("of_polling")) {
    text += fmt::format("; {}x polling's", number(r["of_polling"]));
  }
  if (r.contains("cpu_of_polling")) {
    text += fmt::format(" at {}x its CPU per event", number(r["cpu_of_polling"]));
  }
  if (r["scenario"] == "ceiling") text += " (sink acknowledges at once: SQL only)";
  if (r["scenario"] == "drain" && r.value("source", "") == "cdc") {
    text += " (catch-up: written while no relay ran, kept by the slot)";
  }
  if (r["scenario"] == "table-less") {
    text += " (table-less events, no rows: catch-up from the slot)";
  }
  return text;
}

// "; relay used 0.10 cores, its PostgreSQL sessions 0.20 (walsender 0.08), the broker 0.03:
// 95 µs of CPU per event" as far as known.
std::string live_cpu_text(const json& r) {
  if (!r["relay_cores"].is_number() || !r["relay_postgres_session_cores"].is_number()) return {};
  std::string text = fmt::format(
      "; relay used {:.2f} cores, its PostgreSQL session{} {:.2f}", r["relay_cores"].get<double>(),
      r.value("source", "") == "cdc" ? "s" : "", r["relay_postgres_session_cores"].get<double>());
  if (r.value("source", "") == "cdc" && r["relay_walsender_cores"].is_number()) {
    text += fmt::format(" (walsender {:.2f})", r["relay_walsender_cores"].get<double>());
  }
  if (r["broker_cores"].is_number()) {
    text += fmt::format(", the broker {:.2f}", r["broker_cores"].get<double>());
  }
  if (r.value("relay_side_cpu_us_per_event", json()).is_number()) {
    text +=
        fmt::format(": {:.0f} µs of CPU per event", r["relay_side_cpu_us_per_event"].get<double>());
  }
  return text;
}

std::string live_text(const json& r) {
  std::string text = fmt::format(
      "{} tx/s committed; commit→ack p50 {} ms, p95 {} ms, p99 {} ms, max {} ms; {}: {} "
      "events/s, {}",
      number(r["committed_per_s"]), number(r["latency_p50_ms"]), number(r["latency_p95_ms"]),
      number(r["latency_p99_ms"]), number(r["latency_max_ms"]), relays_text(r),
      number(r["relay_events_per_s"]), r["kept_up"].get<bool>() ? "kept up" : "FELL BEHIND");
  if (r.contains("of_producers_alone")) {
    text += fmt::format(" ({:.0f}% of the {} tx/s the producers reached alone around it)",
                        r["of_producers_alone"].get<double>() * 100,
                        number(r["producers_alone_per_s"]));
  }
  if (r.value("source", "") == "cdc" && r.value("published_by_claim", 0) > 0) {
    text += fmt::format("; {} not from the stream but by the relay's own claim (slowest {} ms)",
                        r["published_by_claim"].get<std::size_t>(),
                        number(r["published_by_claim_max_ms"]));
  }
  return text + live_cpu_text(r);
}

// The table's first column: the scenario, its rate for live, and the relay source.
std::string row_name(const json& r) {
  const std::string scenario = r["scenario"];
  std::string name = scenario == "live" ? "live " + r["offered"].get<std::string>() : scenario;
  if (r.contains("source")) name += " (" + r["source"].get<std::string>() + ")";
  return name;
}

void print_table(const std::vector<json>& results) {
  std::cout << "\n" << fmt::format("{:<22} {}", "scenario", "result") << "\n";
  for (const json& r : results) {
    const std::string scenario = r["scenario"];
    std::string text;
    if (scenario == "producer") {
      text = producer_text(r) + " (the same producer path whichever relay source runs)";
    } else if (scenario == "ceiling" || scenario == "drain" || scenario == "table-less") {
      text = backlog_text(r);
    } else if (scenario == "live") {
      text = live_text(r);
    } else if (scenario == "ack") {
      const auto hop = [](const json& h) {
        return fmt::format("p50 {:.2f} / p95 {:.2f} / p99 {:.2f} ms", h["p50_ms"].get<double>(),
                           h["p95_ms"].get<double>(), h["p99_ms"].get<double>());
      };
      text = fmt::format("send→ack at {:.0f}/s: librdkafka alone {}; outbox's Kafka sink {}",
                         r["offered_per_s"].get<double>(), hop(r["librdkafka"]),
                         hop(r["outbox_sink"]));
    } else if (scenario == "answer") {
      text = fmt::format(
          "answer at commit p50 {:.2f} ms, after publish p50 {:.2f} / p99 {:.2f} ms ({:.1f} "
          "polls); one client {:.0f} -> {:.0f} requests/s",
          r["commit_ms"]["p50"].get<double>(), r["answer_after_publish_ms"]["p50"].get<double>(),
          r["answer_after_publish_ms"]["p99"].get<double>(), r["polls_per_wait"].get<double>(),
          r["requests_per_s_at_commit"].get<double>(),
          r["requests_per_s_after_publish"].get<double>());
    }
    std::cout << fmt::format("{:<22} {}", row_name(r), text) << "\n";
  }
  std::cout << std::endl;
}

}  // namespace

json machine(const Setup& setup) {
  std::string cpu = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  long memory_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemTotal:", 0) == 0) memory_kib = std::stol(line.substr(9));
  }
  auto c = setup.connect();
  const auto settings =
      pg::exec(c.get(),
               "SELECT current_setting('server_version'), current_setting('fsync'),"
               " current_setting('synchronous_commit'), current_setting('shared_buffers')");
  return {{"scenario", "machine"},
          {"cpus", std::thread::hardware_concurrency()},
          {"cpu", cpu},
          {"memory_gib", static_cast<double>(memory_kib) / 1048576.0},
          {"postgresql", std::string(settings.text(0, 0))},
          {"fsync", std::string(settings.text(0, 1))},
          {"synchronous_commit", std::string(settings.text(0, 2))},
          {"shared_buffers", std::string(settings.text(0, 3))},
          {"librdkafka", rd_kafka_version_str()},
          {"sink", !setup.http_url.empty()    ? "http"
                   : !setup.nats_url.empty()  ? "nats"
                   : setup.rabbitmq           ? "rabbitmq"
                   : !setup.redis_url.empty() ? "redis"
                                              : "kafka"},
          {"kafka", !setup.http_url.empty()
                        ? "not used: --sink http, to a receiver in the bench process (cpp-httplib)"
                    : !setup.nats_url.empty()
                        ? "not used: --sink nats, to Debian's nats-server (JetStream, file storage)"
                    : setup.rabbitmq
                        ? "not used: --sink rabbitmq, to a node of Debian's rabbitmq-server (a "
                          "quorum queue)"
                    : !setup.redis_url.empty()
                        ? "not used: --sink redis, to Debian's redis-server (appendonly yes, "
                          "appendfsync always)"
                    : setup.kafka ? "librdkafka mock cluster, 1 broker, in the bench process"
                                  : setup.brokers}};
}

void finish_report(const BenchOptions& options, const std::vector<json>& results,
                   const json& about) {
  print_table(results);
  std::cout << fmt::format(
                   "machine: {} x {}, {:.0f} GiB; PostgreSQL {} (fsync {}, shared_buffers "
                   "{}); librdkafka {}; Kafka: {}",
                   about["cpus"].get<unsigned>(), about["cpu"].get<std::string>(),
                   about["memory_gib"].get<double>(), about["postgresql"].get<std::string>(),
                   about["fsync"].get<std::string>(), about["shared_buffers"].get<std::string>(),
                   about["librdkafka"].get<std::string>(), about["kafka"].get<std::string>())
            << std::endl;
  std::ofstream file(std::filesystem::path(options.out_dir) / "results.json");
  json everything = results;
  everything.push_back(about);
  file << everything.dump(2) << "\n";
  std::cout << "results, plots and relay logs: " << options.out_dir << "/" << std::endl;
}

}  // namespace outbox::cli::bench
