#include "fault/workers.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "outbox/kafka.hpp"
#include "outbox/nats_consumer.hpp"
#include "outbox/observe.hpp"
#include "outbox/producer.hpp"
#include "outbox/rabbitmq_consumer.hpp"
#include "outbox/redis_consumer.hpp"
#include "outbox/transaction.hpp"
#include "pg/connection.hpp"

namespace outbox::campaign {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};

void stop_on_sigterm() {
  struct sigaction action {};
  action.sa_handler = [](int) { g_stop.store(true); };
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

class Log {
 public:
  explicit Log(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~Log() { ::close(fd_); }
  // One write(2) per line: a SIGKILL after it returns cannot lose the line.
  void line(const std::string& text) const {
    const std::string with_newline = text + "\n";
    if (::write(fd_, with_newline.data(), with_newline.size()) < 0) std::perror("log write");
  }

 private:
  int fd_;
};

pg::Connection connect_with_retry(const std::string& url) {
  for (auto backoff = 100ms;; backoff = std::min(backoff * 2, std::chrono::milliseconds(2000))) {
    try {
      return pg::Connection::open(url, "campaign-worker");
    } catch (const DatabaseError& e) {
      if (g_stop) throw;
      std::this_thread::sleep_for(backoff);
    }
  }
}

}  // namespace

void create_campaign_tables(const std::string& database_url) {
  auto connection = pg::Connection::open(database_url, "campaign-setup");
  pg::exec(connection.get(), "SET client_min_messages = warning");
  pg::exec(connection.get(), R"SQL(
CREATE TABLE IF NOT EXISTS campaign.effects (
  applied_order bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregate_id text NOT NULL,
  aggregate_sequence bigint NOT NULL, previous_sequence bigint NOT NULL);
CREATE TABLE IF NOT EXISTS campaign.projection (
  aggregate_id text PRIMARY KEY, last_sequence bigint NOT NULL);
-- What the retention cleanup deleted, recorded in the deleting transaction (a batch rolled back
-- by a crash leaves no record), so the checker sees every event ever written.
CREATE TABLE IF NOT EXISTS campaign.cleaned (
  event_id uuid NOT NULL, published_at timestamptz, skipped_at timestamptz,
  deleted_at timestamptz NOT NULL DEFAULT now());
CREATE OR REPLACE FUNCTION campaign.record_cleaned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO campaign.cleaned (event_id, published_at, skipped_at)
  VALUES (OLD.event_id, OLD.published_at, OLD.skipped_at);
  RETURN OLD;
END $$;
DROP TRIGGER IF EXISTS record_cleaned ON campaign.outbox_events;
CREATE TRIGGER record_cleaned BEFORE DELETE ON campaign.outbox_events
  FOR EACH ROW EXECUTE FUNCTION campaign.record_cleaned();
-- Table-less producers write no row: their transactions record the event ids here instead.
CREATE TABLE IF NOT EXISTS campaign.intents (event_id uuid PRIMARY KEY);
CREATE OR REPLACE VIEW campaign.all_events AS
  SELECT event_id FROM campaign.outbox_events UNION ALL SELECT event_id FROM campaign.cleaned
  UNION ALL SELECT event_id FROM campaign.intents;
)SQL");
}

std::string campaign_aggregate(int index) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    std::vector<bool> taken(kPartitions, false);
    for (int k = 0; static_cast<int>(out.size()) < kPartitions; ++k) {
      const std::string name = "acct-" + std::to_string(k);
      const int partition = rd_kafka_msg_partitioner_murmur2(nullptr, name.data(), name.size(),
                                                             kPartitions, nullptr, nullptr);
      if (!taken[static_cast<std::size_t>(partition)]) {
        taken[static_cast<std::size_t>(partition)] = true;
        out.push_back(name);
      }
    }
    return out;
  }();
  if (index < 0 || index >= kPartitions) {
    throw std::invalid_argument("campaign_aggregate: at most kPartitions aggregates");
  }
  return names[static_cast<std::size_t>(index)];
}

// The SQL producer, <schema>.enqueue() (migration 16), as a service in another language calls it:
// one call per event, ids made here so the log names them before the commit. Returns the
// transaction's id, as Producer::enqueue does.
std::uint64_t enqueue_by_sql(PGconn* conn, const std::vector<NewEvent>& events,
                             std::vector<EventId>& ids) {
  const std::string sql = std::string("SELECT aggregate_sequence FROM ") + kSchema +
                          ".enqueue($1, $2, $3, $4::jsonb, event_id => $5::uuid)";
  for (const NewEvent& e : events) {
    ids.push_back(EventId::generate());
    const std::string id = ids.back().to_string();
    pg::exec(conn, sql,
             {e.aggregate_type.c_str(), e.aggregate_id.c_str(), e.event_type.c_str(),
              e.payload.c_str(), id.c_str()});
  }
  return static_cast<std::uint64_t>(pg::exec(conn, "SELECT txid_current()").int64(0, 0));
}

int run_producer(const WorkerOptions& options) {
  stop_on_sigterm();
  const Log log(options.log_path);
  const Producer producer(ProducerOptions{SchemaName(kSchema), 4096});
  std::mt19937 random(options.seed);
  const auto pause =
      std::chrono::microseconds(1000000 / std::max(1, options.transactions_per_second));
  pg::Connection connection = connect_with_retry(options.database_url);
  while (!g_stop) {
    std::this_thread::sleep_for(pause);
    if (!connection.healthy()) connection = connect_with_retry(options.database_url);
    PGconn* conn = connection.get();
    const std::string aggregate =
        campaign_aggregate(static_cast<int>(random() % static_cast<unsigned>(options.aggregates)));
    std::vector<NewEvent> events(1 + random() % 3);
    for (auto& e : events) {
      e = NewEvent{"account",   aggregate,
                   "Deposited", R"({"cents":)" + std::to_string(random() % 10000) + "}",
                   "{}",        1,
                   {}};
    }
    const bool roll_back = random() % 10 == 0;
    // Half the transactions through the C++ producer, half through the SQL function: the two
    // share each aggregate's counter (and its lock), so sequences stay gap-free across both.
    const bool by_sql = random() % 2 == 0;
    std::uint64_t txid = 0;
    try {
      pg::exec(conn, "BEGIN");
      std::vector<EventId> ids;
      if (by_sql) {
        txid = enqueue_by_sql(conn, events, ids);
      } else {
        for (const auto& e : producer.enqueue(conn, events)) {
          txid = e.transaction_id;
          ids.push_back(e.event_id);
        }
      }
      std::string pending = "pending " + std::to_string(txid);
      for (const EventId& id : ids) pending += " " + id.to_string();
      log.line(pending);
      if (roll_back) {
        pg::exec(conn, "ROLLBACK");
        log.line("rolledback " + std::to_string(txid));
      } else {
        outbox::commit(conn);
        log.line("ok " + std::to_string(txid));
      }
    } catch (const OutcomeUnknown&) {
      log.line("unknown " + std::to_string(txid));
    } catch (const DatabaseError& e) {
      // Before COMMIT was sent, or refused by the server: not committed.
      if (txid != 0) log.line("failed " + std::to_string(txid));
      pg::rollback_quietly(conn);
    }
  }
  return 0;
}

// The projection every campaign consumer applies: one effect row per application, with the
// aggregate's sequence before it (the checker finds repeats and inversions there).
void apply_campaign_effect(PGconn* conn, const ConsumedEvent& event) {
  const auto previous = pg::exec(
      conn,
      "SELECT coalesce((SELECT last_sequence FROM campaign.projection WHERE aggregate_id = $1 "
      "FOR UPDATE), 0)::text",
      {event.aggregate_id.c_str()});
  const std::string previous_sequence(previous.text(0, 0));
  const std::string sequence = std::to_string(event.aggregate_sequence);
  const std::string id = event.event_id.to_string();
  pg::exec(conn,
           "INSERT INTO campaign.effects (event_id, aggregate_id, aggregate_sequence, "
           "previous_sequence) VALUES ($1::uuid, $2, $3::bigint, $4::bigint)",
           {id.c_str(), event.aggregate_id.c_str(), sequence.c_str(), previous_sequence.c_str()});
  pg::exec(conn,
           "INSERT INTO campaign.projection VALUES ($1, $2::bigint) ON CONFLICT (aggregate_id) "
           "DO UPDATE SET last_sequence = EXCLUDED.last_sequence",
           {event.aggregate_id.c_str(), sequence.c_str()});
};
// Every campaign consumer is gap-aware: the checker's inversions and the events it finds not
// applied would show an event held and never let through, or one applied out of order.
InboxOrdering campaign_ordering() {
  InboxOrdering ordering;
  ordering.enabled = true;
  ordering.park_after = 30s;
  return ordering;
}

int run_consumer(const WorkerOptions& options) {
  stop_on_sigterm();
  KafkaConsumerOptions consumer_options;
  consumer_options.brokers = options.brokers;
  consumer_options.group_id = "campaign";
  consumer_options.topics = {options.topic};
  consumer_options.on_offset_gap =
      options.on_offset_gap == "skip" ? OffsetGapPolicy::skip : OffsetGapPolicy::stop;
  consumer_options.database_url = options.database_url;
  consumer_options.schema = SchemaName(kSchema);
  consumer_options.consumer_name = "projection";
  consumer_options.ordering = campaign_ordering();
  consumer_options.properties = {{"session.timeout.ms", "3000"}, {"heartbeat.interval.ms", "300"}};
  const auto effect = &apply_campaign_effect;

  consumer_options.retry_backoff_max = 2000ms;
  // run() rides out PostgreSQL and broker outages itself; only the first connection is retried
  // here.
  std::unique_ptr<KafkaInboxConsumer> consumer;
  while (!consumer && !g_stop) {
    try {
      consumer = std::make_unique<KafkaInboxConsumer>(consumer_options, effect);
    } catch (const Error& e) {
      if (!e.retryable()) throw;
      std::this_thread::sleep_for(200ms);
    }
  }
  if (!consumer) return 0;
  std::unique_ptr<ObserveServer> observe;
  if (!options.metrics_listen.empty()) {
    ObserveOptions observe_options;
    observe_options.listen = options.metrics_listen;
    observe_options.backlog = false;
    observe = std::make_unique<ObserveServer>(observe_options);
    observe->watch_consumer(consumer_options.consumer_name, *consumer);
    observe->start();
    std::cerr << "metrics port " << observe->port() << std::endl;
  }
  // Every 5 s, and once at the end: how far behind the consumer is, and any offset gap (the
  // campaign reads the last line: a gap means the broker dropped messages it had not applied).
  std::thread stopper([&] {
    const auto report = [&] {
      const KafkaConsumerStats s = consumer->stats();
      std::cerr << fmt::format(
                       "consumer-stats lag={} applied={} offset_gaps={} gap_messages={} "
                       "partitions_stopped={}",
                       s.lag_messages, s.applied, s.offset_gaps, s.offset_gap_messages,
                       s.partitions_stopped)
                << std::endl;
    };
    auto next = std::chrono::steady_clock::now() + 5s;
    while (!g_stop) {
      std::this_thread::sleep_for(50ms);
      if (std::chrono::steady_clock::now() >= next) {
        report();
        next += 5s;
      }
    }
    report();
    consumer->request_stop();
  });
  try {
    consumer->run();
  } catch (...) {
    g_stop = true;
    stopper.join();
    throw;
  }
  stopper.join();
  return 0;
}

namespace {

// Runs a broker's inbox consumer (made by `make`, retried while the broker or PostgreSQL is not
// there yet) until SIGTERM.
template <typename Consumer, typename Make>
int run_broker_consumer(Make make) {
  stop_on_sigterm();
  std::unique_ptr<Consumer> consumer;
  while (!consumer && !g_stop) {
    try {
      consumer = make();
    } catch (const Error& e) {
      if (!e.retryable()) throw;
      std::this_thread::sleep_for(200ms);
    }
  }
  if (!consumer) return 0;
  std::thread stopper([&] {
    while (!g_stop) std::this_thread::sleep_for(50ms);
    consumer->request_stop();
  });
  try {
    consumer->run();
  } catch (...) {
    g_stop = true;
    stopper.join();
    throw;
  }
  stopper.join();
  return 0;
}

}  // namespace

int run_nats_consumer(const WorkerOptions& options) {
  NatsConsumerOptions consumer_options;
  consumer_options.servers = options.nats_url;
  consumer_options.stream = kNatsStream;
  consumer_options.durable = "campaign";
  consumer_options.filter_subject = "outbox.*.*";
  consumer_options.database_url = options.database_url;
  consumer_options.schema = SchemaName(kSchema);
  consumer_options.consumer_name = "projection";
  consumer_options.ordering = campaign_ordering();
  consumer_options.ack_wait = 2s;
  consumer_options.retry_backoff_max = 1000ms;
  return run_broker_consumer<NatsInboxConsumer>([&] {
    return std::make_unique<NatsInboxConsumer>(consumer_options, &apply_campaign_effect);
  });
}

int run_rabbitmq_consumer(const WorkerOptions& options) {
  RabbitMqConsumerOptions consumer_options;
  consumer_options.url = options.rabbitmq_url;
  consumer_options.queue = "campaign";
  consumer_options.exchange = kRabbitMqExchange;
  consumer_options.database_url = options.database_url;
  consumer_options.schema = SchemaName(kSchema);
  consumer_options.consumer_name = "projection";
  consumer_options.ordering = campaign_ordering();
  consumer_options.retry_backoff_max = 1000ms;
  return run_broker_consumer<RabbitMqInboxConsumer>([&] {
    return std::make_unique<RabbitMqInboxConsumer>(consumer_options, &apply_campaign_effect);
  });
}

int run_redis_consumer(const WorkerOptions& options) {
  RedisConsumerOptions consumer_options;
  consumer_options.url = options.redis_url;
  consumer_options.streams = redis_streams(kRedisStreamTemplate, "account", kRedisPartitions);
  consumer_options.group = "campaign";
  consumer_options.consumer = "campaign-consumer";
  consumer_options.database_url = options.database_url;
  consumer_options.schema = SchemaName(kSchema);
  consumer_options.consumer_name = "projection";
  consumer_options.ordering = campaign_ordering();
  consumer_options.lease = 2s;  // a restarted consumer takes its streams back after it
  consumer_options.retry_backoff_max = 1000ms;
  return run_broker_consumer<RedisInboxConsumer>([&] {
    return std::make_unique<RedisInboxConsumer>(consumer_options, &apply_campaign_effect);
  });
}

}  // namespace outbox::campaign
