#pragma once
// The database and brokers `outbox-dev demo` and `outbox-dev bench` talk to: the user's when given,
// else a private PostgreSQL cluster and a Kafka mock cluster started here and stopped with this
// object.

#include <functional>
#include <optional>
#include <string>

#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/kafka_mock.hpp"

namespace outbox::cli {

class Servers {
 public:
  // `database_url` / `kafka_brokers` empty: start the embedded one (`say` tells the user first).
  Servers(const std::string& database_url, const std::string& kafka_brokers,
          const EmbeddedPostgresOptions& postgres_options, int mock_brokers,
          const std::function<void(const std::string&)>& say)
      : url_(database_url), brokers_(kafka_brokers) {
    if (url_.empty()) {
      say("starting a private PostgreSQL cluster (fsync on) ...");
      postgres_.emplace(postgres_options);
      url_ = postgres_->connection_string();
    }
    if (brokers_.empty()) {
      kafka_.emplace(mock_brokers);
      brokers_ = kafka_->bootstrap_servers();
    }
  }

  [[nodiscard]] const std::string& database_url() const { return url_; }
  [[nodiscard]] const std::string& brokers() const { return brokers_; }
  // The mock cluster when this object started one (to create topics, stall brokers).
  [[nodiscard]] std::optional<KafkaMockCluster>& kafka() { return kafka_; }

 private:
  std::optional<EmbeddedPostgres> postgres_;
  std::optional<KafkaMockCluster> kafka_;
  std::string url_;
  std::string brokers_;
};

}  // namespace outbox::cli
