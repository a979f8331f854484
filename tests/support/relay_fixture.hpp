#pragma once
// A fresh schema with a relay's worth of helpers: enqueue events, build sinks and relay options
// for the shared Kafka mock cluster, and check what reached the topic.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "outbox/kafka.hpp"
#include "outbox/producer.hpp"
#include "outbox/relay.hpp"
#include "outbox/transaction.hpp"
#include "support/kafka_reader.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {

using namespace std::chrono_literals;

class RelayFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = fresh_schema();
    topic_ = "relay." + schema_.name();
  }

  std::unique_ptr<Sink> sink(std::map<std::string, std::string> properties = {}) {
    return make_kafka_sink(KafkaSinkOptions{kafka().bootstrap_servers(), "relay." + schema_.name(),
                                            std::move(properties)});
  }
  RelayOptions options(const std::string& id) {
    RelayOptions o;
    o.database_url = database_url();
    o.schema = schema_;
    o.relay_id = id;
    o.batch_size = 50;
    o.idle_poll_max = 100ms;
    return o;
  }

  // `per_aggregate` events for each of `aggregates` aggregates, one transaction per event,
  // interleaved across aggregates; payloads {"k": first_k ...}. `table_less`: by a table-less
  // producer (ProducerOptions::table_less).
  std::vector<EventId> enqueue(int aggregates, int per_aggregate, bool table_less = false,
                               int first_k = 0) {
    ProducerOptions options{schema_, 4096};
    options.table_less = table_less;
    const Producer producer(options);
    std::vector<EventId> ids;
    for (int k = first_k; k < first_k + per_aggregate; ++k) {
      pg::exec(conn(), "BEGIN");
      for (int a = 0; a < aggregates; ++a) {
        ids.push_back(producer
                          .enqueue(conn(), NewEvent{"order", "agg-" + std::to_string(a), "Step",
                                                    R"({"k":)" + std::to_string(k) + "}", "{}", 1,
                                                    std::nullopt})
                          .event_id);
      }
      pg::commit(conn());
    }
    return ids;
  }

  long long unpublished() {
    return count(conn(), "SELECT count(*) FROM " + schema_.table("outbox_events") +
                             " WHERE published_at IS NULL");
  }

  // Every id appears on the topic, and per key the first appearances follow the sequence.
  void expect_on_broker_in_order(const std::vector<EventId>& ids) {
    std::set<std::string> missing;
    for (const auto& id : ids) missing.insert(id.to_string());
    // Until every id was seen: duplicates (allowed) make counting messages not enough. Called
    // after every message, so it looks only at the new ones: going over all of them each time
    // took longer than the 20 s for 4,000 messages under AddressSanitizer.
    std::size_t looked_at = 0;
    const auto messages = read_topic_until(
        kafka().bootstrap_servers(), topic_,
        [&](const std::vector<ReadMessage>& so_far) {
          for (; looked_at < so_far.size(); ++looked_at) {
            missing.erase(so_far[looked_at].headers.at("event_id"));
          }
          return missing.empty();
        },
        20s);
    std::set<std::string> seen;
    std::map<std::string, long long> last_sequence;
    for (const auto& m : messages) {
      const std::string& id = m.headers.at("event_id");
      if (!seen.insert(id).second) continue;  // a duplicate publish is allowed
      const long long sequence = std::stoll(m.headers.at("aggregate_sequence"));
      EXPECT_EQ(sequence, last_sequence[m.key] + 1) << "key " << m.key << " out of order";
      last_sequence[m.key] = sequence;
      EXPECT_EQ(m.headers.at("aggregate_type"), "order");
      EXPECT_EQ(m.headers.at("event_type"), "Step");
      EXPECT_EQ(m.headers.at("schema_version"), "1");
    }
    for (const auto& id : ids) EXPECT_TRUE(seen.count(id.to_string())) << id.to_string() << " lost";
  }

  PGconn* conn() { return connection_.get(); }
  pg::Connection connection_ = connect();
  SchemaName schema_;
  std::string topic_;
};

}  // namespace outbox::testing
