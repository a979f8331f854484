#include "support/test_env.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>

namespace outbox::testing {

EmbeddedPostgres& postgres() {
  static EmbeddedPostgres instance;
  return instance;
}

KafkaMockCluster& kafka() {
  static KafkaMockCluster instance(3);
  return instance;
}

NatsServer& nats_server() {
  static NatsServer instance;
  return instance;
}

RabbitMqServer& rabbitmq_server() {
  static RabbitMqServer instance;
  return instance;
}

RedisServer& redis_server() {
  static RedisServer instance;
  return instance;
}

std::string database_url() { return postgres().connection_string(); }

pg::Connection connect() { return pg::Connection::open(database_url(), "outbox-test"); }

SchemaName fresh_schema() {
  static std::atomic<int> counter{0};
  std::string name = "t";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    for (const char c : std::string(info->name()).substr(0, 30)) {
      name +=
          std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
    }
  }
  name += "_" + std::to_string(counter++);
  SchemaName schema(name);
  auto connection = connect();
  pg::exec(connection.get(), "SET client_min_messages = warning");
  pg::exec(connection.get(), "DROP SCHEMA IF EXISTS " + schema.quoted() + " CASCADE");
  migrate(connection.get(), schema);
  return schema;
}

long long count(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  return pg::exec(conn, sql, params).int64(0, 0);
}

std::vector<std::int64_t> sequences_of(PGconn* conn, const SchemaName& schema,
                                       const std::string& aggregate_id) {
  const auto rows = pg::exec(conn,
                             "SELECT aggregate_sequence FROM " + schema.table("outbox_events") +
                                 " WHERE aggregate_id = $1 ORDER BY aggregate_sequence",
                             {aggregate_id.c_str()});
  std::vector<std::int64_t> out;
  for (int row = 0; row < rows.rows(); ++row) out.push_back(rows.int64(row, 0));
  return out;
}

}  // namespace outbox::testing
