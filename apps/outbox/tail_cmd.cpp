// `outbox tail --topic T`: what is on a topic, for a person to look at: each message's partition,
// offset, key, headers and payload, the last --lines of each partition (all with
// --from-beginning), then new ones with --follow until interrupted. As text, every byte from the
// broker shown through printable() (a message may hold what a terminal acts on), or --json: one
// object per message. It joins no consumer group and commits nothing: any consumer's position
// stays where it is.

#include <fmt/format.h>
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/error.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

struct TailFlags {
  KafkaFlags kafka;
  std::string topic;
  std::int64_t lines = 10;
  bool from_beginning = false;
  bool follow = false;
  bool json = false;
};

struct CloseConsumer {
  void operator()(rd_kafka_t* consumer) const {
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
  }
};
using Consumer = std::unique_ptr<rd_kafka_t, CloseConsumer>;
struct DestroyPartitions {
  void operator()(rd_kafka_topic_partition_list_t* list) const {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, DestroyPartitions>;
struct DestroyMessage {
  void operator()(rd_kafka_message_t* message) const { rd_kafka_message_destroy(message); }
};
using Message = std::unique_ptr<rd_kafka_message_t, DestroyMessage>;

constexpr int kTimeoutMs = 10000;

Consumer open_consumer(const TailFlags& flags) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  const auto set = [&](const std::string& key, const std::string& value) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw ConfigError("tail: Kafka property " + key + ": " + error);
    }
  };
  if (flags.kafka.brokers.empty()) throw ConfigError("tail: give the brokers with --kafka-brokers");
  for (const auto& [key, value] : flags.kafka.merged_properties()) set(key, value);
  // After the user's properties, so none of them can change what tail is: a group id the
  // consumer API requires but nothing joins (assign(), never subscribe()) and nothing commits
  // to, and the end of each partition reported (tail stops there).
  set("group.id", "outbox-tail");
  set("enable.auto.commit", "false");
  set("enable.auto.offset.store", "false");
  set("enable.partition.eof", "true");
  set("bootstrap.servers", flags.kafka.brokers);
  rd_kafka_t* consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof error);
  if (consumer == nullptr) {
    rd_kafka_conf_destroy(conf);
    throw ConfigError(std::string("tail: ") + error);
  }
  return Consumer(consumer);
}

// Each partition of the topic from where --lines or --from-beginning says; fills `ends` with
// each partition's end at start (what is on it now).
PartitionList starting_points(rd_kafka_t* consumer, const TailFlags& flags,
                              std::map<std::int32_t, std::int64_t>& ends) {
  // Every topic's metadata, not the topic's own: asking for one topic by name creates it on a
  // broker that auto-creates topics, and a typo would leave an empty topic behind.
  const rd_kafka_metadata_t* metadata = nullptr;
  const rd_kafka_resp_err_t asked = rd_kafka_metadata(consumer, 1, nullptr, &metadata, kTimeoutMs);
  if (asked != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw DatabaseError(fmt::format("tail: the brokers at {} did not answer ({})",
                                    printable(flags.kafka.brokers), rd_kafka_err2str(asked)),
                        "", true);
  }
  std::unique_ptr<const rd_kafka_metadata_t, decltype(&rd_kafka_metadata_destroy)> held(
      metadata, &rd_kafka_metadata_destroy);
  const rd_kafka_metadata_topic_t* found = nullptr;
  for (int i = 0; i < metadata->topic_cnt; ++i) {
    if (flags.topic == metadata->topics[i].topic) found = &metadata->topics[i];
  }
  if (found == nullptr || found->err != RD_KAFKA_RESP_ERR_NO_ERROR || found->partition_cnt == 0) {
    throw InvalidArgument(
        fmt::format("tail: no topic {} on {} (relays write outbox.<aggregate "
                    "type> unless --topic-template says otherwise)",
                    printable(flags.topic), printable(flags.kafka.brokers)));
  }
  PartitionList points(rd_kafka_topic_partition_list_new(found->partition_cnt));
  for (int i = 0; i < found->partition_cnt; ++i) {
    const std::int32_t partition = found->partitions[i].id;
    std::int64_t low = 0, high = 0;
    const rd_kafka_resp_err_t marks = rd_kafka_query_watermark_offsets(
        consumer, flags.topic.c_str(), partition, &low, &high, kTimeoutMs);
    if (marks != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw DatabaseError(fmt::format("tail: partition {} of {}: {}", partition,
                                      printable(flags.topic), rd_kafka_err2str(marks)),
                          "", true);
    }
    ends[partition] = high;
    const std::int64_t start = flags.from_beginning ? low : std::max(low, high - flags.lines);
    rd_kafka_topic_partition_list_add(points.get(), flags.topic.c_str(), partition)->offset = start;
  }
  return points;
}

std::string text_of(const void* bytes, std::size_t size) {
  return bytes == nullptr ? std::string() : std::string(static_cast<const char*>(bytes), size);
}

std::vector<std::pair<std::string, std::string>> headers_of(rd_kafka_message_t* message) {
  std::vector<std::pair<std::string, std::string>> out;
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(message, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
  const char* name = nullptr;
  const void* value = nullptr;
  std::size_t size = 0;
  for (std::size_t i = 0;
       rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i) {
    out.emplace_back(name, text_of(value, size));
  }
  return out;
}

void print(rd_kafka_message_t* message, bool json) {
  const std::string key = text_of(message->key, message->key_len);
  const std::string payload = text_of(message->payload, message->len);
  const auto headers = headers_of(message);
  if (json) {
    nlohmann::json object = {
        {"partition", message->partition},
        {"offset", message->offset},
        {"key", message->key == nullptr ? nlohmann::json(nullptr) : nlohmann::json(key)},
        {"headers", nlohmann::json::object()}};
    for (const auto& [name, value] : headers) object["headers"][name] = value;
    const nlohmann::json parsed = nlohmann::json::parse(payload, nullptr, false);
    object["payload"] = parsed.is_discarded() ? nlohmann::json(payload) : parsed;
    // Bytes that are not UTF-8 become U+FFFD: one line stays one valid JSON object.
    std::cout << object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::string header_text;
  for (const auto& [name, value] : headers) {
    header_text += (header_text.empty() ? "" : " ") + printable(name) + "=" + printable(value);
  }
  std::cout << fmt::format("[{}] @{} key {}  {}\n  {}\n", message->partition, message->offset,
                           message->key == nullptr ? "(none)" : printable(key), header_text,
                           printable(payload, 64 * 1024));
}

int run_tail(const TailFlags& flags) {
  if (flags.topic.empty()) throw InvalidArgument("tail: give the topic with --topic");
  if (flags.lines < 0) throw InvalidArgument("tail: --lines must be 0 or more");
  Consumer consumer = open_consumer(flags);
  std::map<std::int32_t, std::int64_t> ends;
  const PartitionList points = starting_points(consumer.get(), flags, ends);
  std::map<std::int32_t, bool> done;  // partitions read up to where they ended at the start
  for (int i = 0; i < points->cnt; ++i) {
    done[points->elems[i].partition] = points->elems[i].offset >= ends[points->elems[i].partition];
  }
  if (const rd_kafka_resp_err_t assigned = rd_kafka_assign(consumer.get(), points.get());
      assigned != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw DatabaseError(std::string("tail: ") + rd_kafka_err2str(assigned), "", true);
  }
  std::atomic<bool> stop{false};
  const SignalWatch watch = on_termination_signal([&] { stop = true; });
  const auto all_done = [&] {
    for (const auto& [partition, finished] : done) {
      if (!finished) return false;
    }
    return true;
  };
  while (!stop && (flags.follow || !all_done())) {
    Message message(rd_kafka_consumer_poll(consumer.get(), 200));
    if (!message) continue;
    if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      done[message->partition] = true;
      continue;
    }
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      throw DatabaseError(fmt::format("tail: {}", rd_kafka_message_errstr(message.get())), "",
                          true);
    }
    print(message.get(), flags.json);
    if (flags.follow) std::cout << std::flush;  // a reader of a pipe sees each one as it comes
    if (message->offset + 1 >= ends[message->partition]) done[message->partition] = true;
    if (stdout_closed("tail")) return 0;
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

void register_tail(Commands& commands) {
  const auto [tail, flags] =
      commands.add("tail", "print what is on a Kafka topic: key, headers, payload", run_tail);
  Commands::add_kafka_options(tail, flags->kafka);
  tail->add_option("--topic", flags->topic, "the topic, e.g. outbox.order");
  tail->add_option("--lines,-n", flags->lines, "the last N messages of each partition")
      ->capture_default_str();
  tail->add_flag("--from-beginning", flags->from_beginning, "every message still on the topic");
  tail->add_flag("--follow,-f", flags->follow, "then print new messages until interrupted");
  tail->add_flag("--json", flags->json, "one JSON object per message");
}

}  // namespace outbox::cli
