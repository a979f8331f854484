// `outbox kafka-mock`: librdkafka's mock Kafka cluster, until stopped (for demos and tests).

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "common/printable.hpp"
#include "kafka/kafka_topic.hpp"
#include "outbox/testing/kafka_mock.hpp"

namespace outbox::cli {
namespace {

struct KafkaMockFlags {
  int brokers = KafkaMockCluster::kDefaultBrokers;
  int partitions = KafkaMockCluster::kAutoCreatedPartitions;
  std::vector<std::string> topics;
};

int run_kafka_mock(const KafkaMockFlags& flags) {
  KafkaMockCluster cluster(flags.brokers);
  for (const std::string& topic : flags.topics) cluster.create_topic(topic, flags.partitions);
  // librdkafka's mock cluster has no setting for either limit: say so rather than let a consumer
  // that fell behind find its offset silently gone.
  std::cerr << fmt::format(
      "outbox-dev kafka-mock: an in-memory test broker. Each partition keeps at most 5 MiB and "
      "drops "
      "its oldest messages beyond that; {} ({} partition(s) each); other topics are created on "
      "first use with {} partitions. For demos and tests, not for data you need.\n",
      flags.topics.empty() ? std::string("no topic created up front (--topic NAME)")
                           : fmt::format("{} topic(s) created", flags.topics.size()),
      flags.partitions, KafkaMockCluster::kAutoCreatedPartitions);
  std::cout << cluster.bootstrap_servers() << std::endl;
  wait_for_termination();
  return 0;
}

}  // namespace

void register_kafka_mock(Commands& commands) {
  const auto [mock, flags] = commands.add(
      "kafka-mock", "run librdkafka's mock Kafka cluster until stopped", run_kafka_mock);
  mock->add_option("--brokers", flags->brokers, "number of brokers")
      ->check(CLI::Range(1, KafkaMockCluster::kMaxBrokers));
  // What a real cluster refuses, refused here too (an internal topic such as __consumer_offsets
  // would also take the mock's own offsets), so a demo does not teach a name production rejects.
  mock->add_option("--topic", flags->topics,
                   "create this topic up front with --partitions partitions (repeatable)")
      ->check([](const std::string& topic) -> std::string {
        const std::string problem = kafka::topic_problem(topic);
        if (problem.empty()) return "";
        return "\"" + detail::printable(topic, 300) + "\" is not a topic Kafka accepts: it " +
               problem;
      });
  mock->add_option("--partitions", flags->partitions,
                   "partitions of each --topic; each keeps at most 5 MiB, oldest dropped first")
      ->check(CLI::Range(1, 10000));
}

}  // namespace outbox::cli
