// The retention gap on purpose (docs/GUARANTEES.md, "A consumer behind the broker's retention"):
// a relay process publishes to a one-partition topic, the consumer process applies three events,
// then stops reading (SIGSTOP) while 32 events of 256 KiB go out: librdkafka's mock keeps 5 MiB
// per partition, so the oldest of them are dropped before the consumer read them, as a broker
// drops them past retention.bytes. Resumed, the consumer must stop the partition instead of
// skipping: nothing after the gap applied, its /metrics showing what the OutboxConsumerOffsetGap
// alert reads (outbox_consumer_partitions_stopped 1, the gap counted with its size) and /readyz
// failing with the partition and offsets. `outbox audit --consumer` (a real process) then names
// the events as not applied.

#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <thread>

#include "fault/process.hpp"
#include "fault/scenarios.hpp"
#include "fault/workers.hpp"
#include "outbox/producer.hpp"
#include "outbox/schema.hpp"
#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/kafka_mock.hpp"
#include "outbox/transaction.hpp"
#include "pg/connection.hpp"
#include "support/kafka_reader.hpp"

namespace outbox::campaign {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kGapTopic = "outbox.ledger";  // the relays' template: outbox.<type>

long long scalar(const std::string& url, const std::string& sql) {
  auto connection = pg::Connection::open(url, "retention-gap-probe");
  return pg::exec(connection.get(), sql).int64(0, 0);
}

template <typename Condition>
bool wait_until(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(100ms);
  }
  return true;
}

void enqueue(const std::string& url, int events, std::size_t bytes) {
  auto connection = pg::Connection::open(url, "retention-gap-producer");
  const Producer producer(ProducerOptions{SchemaName(kSchema)});
  for (int i = 0; i < events; ++i) {
    pg::exec(connection.get(), "BEGIN");
    producer.enqueue(connection.get(), NewEvent{"ledger",
                                                "book-" + std::to_string(i % 3),
                                                "Posted",
                                                R"({"pad":")" + std::string(bytes, 'x') + "\"}",
                                                "{}",
                                                1,
                                                {}});
    commit(connection.get());
  }
}

// The port the consumer worker wrote to its log ("metrics port N"), or 0.
int metrics_port(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string line;
  std::smatch m;
  static const std::regex pattern(R"(metrics port (\d+))");
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, pattern)) return std::stoi(m[1]);
  }
  return 0;
}

// The value of the series `name{consumer="projection"...}` in a /metrics body, or -1.
double series(const std::string& body, const std::string& name) {
  const std::regex pattern("\n" + name + R"(\{[^}]*consumer="projection"[^}]*\} ([-0-9.e+]+))");
  std::smatch m;
  return std::regex_search(body, m, pattern) ? std::stod(m[1]) : -1;
}

}  // namespace

int run_retention_gap(const ScenarioOptions& options) {
  char dir_template[] = "/tmp/outbox-retention-gap-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::filesystem::path dir(dir_template);
  const auto log = [&](const std::string& name) { return (dir / (name + ".log")).string(); };
  EmbeddedPostgres postgres;
  KafkaMockCluster kafka(1);
  kafka.create_topic(kGapTopic, 1, 1);
  const std::string url = postgres.connection_string();
  migrate(url, SchemaName(kSchema));
  create_campaign_tables(url);

  Process relay({options.outbox_binary, "relay", "--db", url, "--schema", kSchema,
                 "--kafka-brokers", kafka.bootstrap_servers(), "--relay-id", "r1"},
                std::map<std::string, std::string>{}, log("relay"));
  Process consumer(
      {options.self_binary, "consumer", "--db", url, "--brokers", kafka.bootstrap_servers(),
       "--topic", kGapTopic, "--metrics-listen", "127.0.0.1:0"},
      std::map<std::string, std::string>{}, log("consumer"));
  const auto applied = [&] { return scalar(url, "SELECT count(*) FROM campaign.effects"); };
  const auto unpublished = [&] {
    return scalar(url, "SELECT count(*) FROM campaign.outbox_events WHERE published_at IS NULL");
  };
  std::vector<std::string> failures;
  const auto expect = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  };

  enqueue(url, 3, 10);
  expect(wait_until([&] { return applied() == 3; }, 30s), "the first 3 events were not applied");
  // Past the consumer's auto-commit interval (5 s), so offset 3 is the group's.
  std::this_thread::sleep_for(6s);
  consumer.signal(SIGSTOP);
  enqueue(url, 32, 256 * 1024);
  expect(wait_until([&] { return unpublished() == 0; }, 60s), "the relay did not publish all");
  const long long low = testing::watermarks(kafka.bootstrap_servers(), kGapTopic, 0).first;
  const long long dropped = low - 3;
  expect(dropped > 0, "the mock kept every message: nothing was dropped");
  consumer.signal(SIGCONT);

  const int port = [&] {
    int p = 0;
    wait_until([&] { return (p = metrics_port(log("consumer"))) != 0; }, 10s);
    return p;
  }();
  httplib::Client client("127.0.0.1", port);
  std::string metrics;
  const bool stopped = wait_until(
      [&] {
        const auto response = client.Get("/metrics");
        if (response && response->status == 200) metrics = response->body;
        return series(metrics, "outbox_consumer_partitions_stopped") == 1;
      },
      30s);
  expect(stopped, "the consumer did not stop the partition");
  for (int i = 0; i < 20; ++i) std::this_thread::sleep_for(100ms);  // time to apply, were it to
  expect(applied() == 3, fmt::format("{} events applied after the gap", applied() - 3));
  expect(series(metrics, "outbox_consumer_offset_gaps_total") == 1, "the gap was not counted");
  expect(
      series(metrics, "outbox_consumer_offset_gap_messages_total") == static_cast<double>(dropped),
      "the gap's size is not the messages the broker dropped");
  const auto ready = client.Get("/readyz");
  expect(ready && ready->status == 503 &&
             ready->body.find(fmt::format("{}[0]: the next message to apply, offset 3, is gone",
                                          kGapTopic)) != std::string::npos,
         "/readyz does not fail naming the partition and the offset: " +
             (ready ? ready->body : std::string("no answer")));

  // The audit, as an operator runs it, names every event after the gap as not applied.
  Process audit({options.outbox_binary, "audit", "--db", url, "--schema", kSchema,
                 "--kafka-brokers", kafka.bootstrap_servers(), "--topic", kGapTopic, "--since",
                 "1h", "--from-beginning", "--consumer", "projection"},
                std::map<std::string, std::string>{}, log("audit"));
  expect(audit.wait_for_exit(60s) && WIFEXITED(audit.status()) && WEXITSTATUS(audit.status()) == 1,
         "outbox audit did not exit 1");
  std::ifstream audit_log(log("audit"));
  const std::string audit_text((std::istreambuf_iterator<char>(audit_log)),
                               std::istreambuf_iterator<char>());
  expect(audit_text.find("not applied by projection 32") != std::string::npos,
         "the audit does not report the 32 events as not applied: " + audit_text);

  consumer.stop(10s);
  relay.stop(10s);
  std::cout << fmt::format(
                   "retention-gap: dropped={} applied_after_gap={} stopped={} "
                   "gaps_counted={}",
                   dropped, applied() - 3, stopped ? 1 : 0,
                   series(metrics, "outbox_consumer_offset_gaps_total"))
            << std::endl;
  for (const std::string& failure : failures) std::cout << "  " << failure << "\n";
  const bool ok = failures.empty();
  if (ok && !options.keep) std::filesystem::remove_all(dir);
  if (!ok) std::cout << "  logs in " << dir.string() << "\n";
  std::cout << (ok ? "scenario: 1 passed, 0 failed" : "scenario: 0 passed, 1 failed") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace outbox::campaign
