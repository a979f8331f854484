#pragma once
// What integration tests share: one embedded PostgreSQL, one Kafka mock cluster and one NATS
// server per test process (each started on first use), and a fresh schema per test so tests never
// see each other.

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/schema.hpp"
#include "outbox/testing/embedded_postgres.hpp"
#include "outbox/testing/kafka_mock.hpp"
#include "outbox/testing/nats_server.hpp"
#include "outbox/testing/rabbitmq_server.hpp"
#include "outbox/testing/redis_server.hpp"
#include "pg/connection.hpp"

namespace outbox::testing {

EmbeddedPostgres& postgres();
KafkaMockCluster& kafka();
NatsServer& nats_server();          // Debian's nats-server with JetStream
RabbitMqServer& rabbitmq_server();  // Debian's rabbitmq-server, a node of its own
RedisServer& redis_server();        // Debian's redis-server, AOF fsynced on each write
std::string database_url();
pg::Connection connect();

// A schema named after the running test, migrated, empty.
SchemaName fresh_schema();

// count(*) of a query's rows.
long long count(PGconn* conn, const std::string& sql, const std::vector<const char*>& params = {});

// The sequences of an aggregate's events in `schema`, lowest first.
std::vector<std::int64_t> sequences_of(PGconn* conn, const SchemaName& schema,
                                       const std::string& aggregate_id);

}  // namespace outbox::testing
