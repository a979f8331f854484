// outbox: the command-line tool. One subcommand per job; each validates its flags before touching
// anything and exits non-zero with a message that says what to change.

#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_common.hpp"
#include "common/backoff.hpp"
#include "common/fault.hpp"
#include "common/redact.hpp"
#include "outbox/byte_size.hpp"
#include "outbox/duration.hpp"
#include "outbox/embedded_postgres.hpp"
#include "outbox/error.hpp"
#include "outbox/kafka.hpp"
#include "outbox/kafka_mock.hpp"
#include "outbox/relay.hpp"
#include "outbox/roles.hpp"
#include "outbox/schema.hpp"
#include "pg/connection.hpp"

namespace outbox::cli {

void on_termination_signal(std::function<void()> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // a closed terminal or a supervisor's hangup: stop in order too
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)] {
    int signal_number = 0;
    sigwait(&set, &signal_number);
    on_signal();
  }).detach();
}

namespace {

// Runs until SIGINT/SIGTERM.
void wait_for_termination() {
  static std::mutex mutex;
  static std::condition_variable cv;
  static bool stop = false;
  on_termination_signal([] {
    std::lock_guard lock(mutex);
    stop = true;
    cv.notify_all();
  });
  std::unique_lock lock(mutex);
  cv.wait(lock, [] { return stop; });
}

std::map<std::string, std::string> parse_properties(const std::vector<std::string>& items) {
  std::map<std::string, std::string> properties;
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError("--kafka-property \"" + item + "\": expected key=value, e.g. linger.ms=5");
    }
    properties[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return properties;
}

// Every secret an argument may hold: passwords of connection strings, values of Kafka properties
// that hold secrets.
std::vector<std::string> argument_secrets(int argc, char** argv) {
  std::vector<std::string> secrets;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    for (std::string& secret : detail::connection_secrets(argument)) {
      secrets.push_back(std::move(secret));
    }
    if (const auto eq = argument.find('=');
        eq != std::string_view::npos && detail::is_secret_kafka_property(argument.substr(0, eq))) {
      secrets.emplace_back(argument.substr(eq + 1));
    }
  }
  return secrets;
}

// CLI11 reads integers with strtoll base 0: "010" would be 8 and "0x10" 16. Every integer flag
// takes plain decimal only (leading zeros allowed and read as decimal).
void decimal_integers_only(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (!type.starts_with("INT") && !type.starts_with("UINT")) continue;
    option->transform(
        CLI::Validator(
            [](std::string& value) -> std::string {
              std::size_t digits = value.starts_with('-') ? 1 : 0;
              if (digits == value.size() ||
                  value.find_first_not_of("0123456789", digits) != std::string::npos) {
                return "takes a whole decimal number, not \"" + value + "\"";
              }
              while (digits + 1 < value.size() && value[digits] == '0') value.erase(digits, 1);
              return {};
            },
            ""),
        "decimal");
  }
  for (CLI::App* sub : app.get_subcommands({})) decimal_integers_only(*sub);
}

int cmd_migrate(const std::string& db, const std::string& schema_text, std::int64_t lock_timeout_ms,
                bool create_roles_too) {
  const SchemaName schema(schema_text);
  auto connection = pg::Connection::open(database_url(db), "outbox-migrate");
  const auto report = migrate(connection.get(), schema, std::chrono::milliseconds(lock_timeout_ms));
  std::cout << "schema " << schema.name() << ": version " << report.from_version << " -> "
            << report.to_version << " (" << report.applied << " migration(s) applied)\n";
  if (create_roles_too) {
    const RoleNames roles = create_roles(connection.get(), schema);
    std::cout << fmt::format(
        "roles {}, {}, {}, {}: privileges set (GRANT them to your login roles)\n", roles.writer,
        roles.relay, roles.inbox, roles.admin);
  }
  return 0;
}

struct RelayFlags {
  std::string db;
  std::string schema = "outbox";
  std::string brokers;
  std::vector<std::string> properties;
  std::string properties_file;  // key=value lines; --kafka-property overrides
  std::string topic_template = "outbox.{aggregate_type}";
  std::string relay_id;
  std::size_t batch_size = 500;
  std::size_t max_in_flight = 10000;
  std::string max_in_flight_bytes = "64MiB";
  long lease_ms = 30000;
  long backoff_base_ms = 500;
  long backoff_max_ms = 300000;
  int max_attempts = 25;
  std::string sink = "kafka";
  std::string stats_every;  // empty: only at the end
  bool durable_marks = false;
};

// One line a log collector or a person can read; printed every --stats-every and at the end. The
// last error says how old it is: next to "health running" it is history, not the present.
std::string stats_line(const std::string& relay_id, const RelayStats& s) {
  return fmt::format(
      "relay {}: health {}, published {}, failed {}, fenced {}, quarantined {}, in flight {} ({} "
      "bytes), reconnects {}, claim statements {}, mark statements {}{}",
      relay_id, to_string(s.health), s.published, s.failed, s.fenced, s.quarantined, s.in_flight,
      s.in_flight_bytes, s.reconnects, s.claim_queries, s.mark_queries,
      s.last_error.empty()
          ? ""
          : fmt::format(", last error {} s ago: {}",
                        std::chrono::duration_cast<std::chrono::seconds>(s.last_error_age).count(),
                        s.last_error));
}

int cmd_relay(const RelayFlags& flags) {
  const bool discard = flags.sink == "discard";
  if (!discard && flags.sink != "kafka") {
    throw ConfigError("relay: --sink must be kafka or discard, not \"" + flags.sink + "\"");
  }
  if (!discard && flags.brokers.empty()) {
    throw ConfigError("relay: --kafka-brokers host:port[,host:port] is required");
  }
  const auto stats_every =
      flags.stats_every.empty() ? std::chrono::milliseconds(0) : parse_duration(flags.stats_every);
  if (!flags.stats_every.empty() && stats_every < std::chrono::milliseconds(100)) {
    throw ConfigError("relay: --stats-every must be at least 100ms, not \"" + flags.stats_every +
                      "\"");
  }
  RelayOptions options;
  options.database_url = database_url(flags.db);
  options.schema = SchemaName(flags.schema);
  options.relay_id = flags.relay_id;
  options.batch_size = flags.batch_size;
  options.max_in_flight = flags.max_in_flight;
  options.max_in_flight_bytes = parse_byte_size(flags.max_in_flight_bytes);
  options.lease = std::chrono::milliseconds(flags.lease_ms);
  options.backoff_base = std::chrono::milliseconds(flags.backoff_base_ms);
  options.backoff_max = std::chrono::milliseconds(flags.backoff_max_ms);
  options.max_attempts = flags.max_attempts;
  options.durable_marks = flags.durable_marks;
  KafkaSinkOptions sink;
  sink.brokers = flags.brokers;
  sink.topic_template = flags.topic_template;
  if (!flags.properties_file.empty()) sink.properties = read_properties_file(flags.properties_file);
  for (auto& [key, value] : parse_properties(flags.properties)) sink.properties[key] = value;
  sink.max_message_timeout = options.lease;
  auto make_sink = [&] { return discard ? make_discard_sink() : make_kafka_sink(sink); };

  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  Relay* current = nullptr;
  on_termination_signal([&] {
    std::lock_guard lock(mutex);
    stopping = true;
    if (current != nullptr) current->request_stop();
    wake.notify_all();
  });
  // Once running, the relay rides out PostgreSQL outages itself (Relay::run). Until PostgreSQL
  // accepts the first connection, retry with capped exponential backoff.
  std::unique_ptr<Relay> relay;
  detail::Backoff backoff(std::chrono::milliseconds(500), std::chrono::milliseconds(30000));
  for (;;) {
    const auto wait = backoff.next();
    try {
      relay = std::make_unique<Relay>(options, make_sink());
      break;
    } catch (const DatabaseError& e) {
      if (!e.retryable()) throw;
      std::cerr << "outbox relay: " << e.what() << "; retrying in " << wait.count() << " ms\n";
    }
    std::unique_lock lock(mutex);
    if (wake.wait_for(lock, wait, [&] { return stopping; })) return 0;
  }
  {
    std::lock_guard lock(mutex);
    if (stopping) return 0;
    current = relay.get();
  }
  std::thread reporter;
  bool finished = false;
  if (stats_every.count() > 0) {
    reporter = std::thread([&] {
      std::unique_lock lock(mutex);
      while (!wake.wait_for(lock, stats_every, [&] { return finished; })) {
        std::cout << stats_line(relay->relay_id(), relay->stats()) << std::endl;
      }
    });
  }
  auto stop_reporter = [&] {
    {
      std::lock_guard lock(mutex);
      finished = true;
      current = nullptr;  // the signal thread must never see a destroyed relay
    }
    wake.notify_all();
    if (reporter.joinable()) reporter.join();
  };
  try {
    relay->run();
  } catch (...) {
    stop_reporter();
    throw;
  }
  stop_reporter();
  std::cout << stats_line(relay->relay_id(), relay->stats()) << std::endl;
  return 0;
}

int cmd_status(const std::string& db, const std::string& schema_text) {
  const SchemaName schema(schema_text);
  auto connection = open_cli_connection(db, "outbox-status");
  const auto result = pg::exec(
      connection.get(),
      "WITH pending AS (SELECT * FROM " + schema.table("outbox_events") +
          " WHERE published_at IS NULL AND skipped_at IS NULL)"
          " SELECT (SELECT count(*) FROM pending),"
          "        (SELECT count(*) FROM pending WHERE claim_until > now()),"
          "        (SELECT count(*) FROM pending WHERE attempt_count > 0 AND quarantined_at IS "
          "NULL),"
          "        (SELECT count(*) FROM pending WHERE quarantined_at IS NOT NULL),"
          "        (SELECT count(*) FROM " +
          schema.table("outbox_events") +
          "         WHERE published_at IS NOT NULL),"
          "        (SELECT count(*) FROM " +
          schema.table("outbox_events") +
          "         WHERE skipped_at IS NOT NULL),"
          "        (SELECT coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8"
          "         FROM pending)");
  std::cout << "pending " << result.text(0, 0) << " (in flight " << result.text(0, 1)
            << ", retrying " << result.text(0, 2) << ", quarantined " << result.text(0, 3)
            << "), published " << result.text(0, 4) << ", skipped " << result.text(0, 5)
            << ", oldest pending " << result.text(0, 6) << " s\n";
  return 0;
}

int cmd_kafka_mock(int brokers, int partitions, const std::vector<std::string>& topics) {
  KafkaMockCluster cluster(brokers);
  for (const std::string& topic : topics) cluster.create_topic(topic, partitions);
  // librdkafka's mock cluster has no setting for either limit: say so rather than let a consumer
  // that fell behind find its offset silently gone.
  std::cerr << fmt::format(
      "outbox kafka-mock: an in-memory test broker. Each partition keeps at most 5 MiB and drops "
      "its oldest messages beyond that; {} ({} partition(s) each); other topics are created on "
      "first use with 4 partitions. For demos and tests, not for data you need.\n",
      topics.empty() ? std::string("no topic created up front (--topic NAME)")
                     : fmt::format("{} topic(s) created", topics.size()),
      partitions);
  std::cout << cluster.bootstrap_servers() << std::endl;
  wait_for_termination();
  return 0;
}

int cmd_postgres() {
  EmbeddedPostgres postgres;
  std::cout << postgres.connection_string() << std::endl;
  wait_for_termination();
  return 0;
}

}  // namespace
}  // namespace outbox::cli

int main(int argc, char** argv) {
  using namespace outbox::cli;
  // Output to a closed pipe (`outbox relay | head`, a log shipper that died) fails that write; it
  // must not kill a relay between its ack and its mark.
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"outbox: transactional outbox for PostgreSQL"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows every default

  std::string db;
  std::string schema = "outbox";
  auto* migrate = app.add_subcommand("migrate", "create or upgrade outbox's tables");
  migrate->add_option("--db", db,
                      "libpq connection string or URI (default: $OUTBOX_DATABASE_URL, PG*)");
  migrate->add_option("--schema", schema, "schema for outbox's tables");
  std::int64_t migrate_lock_timeout_ms = outbox::kMigrateLockTimeout.count();
  migrate
      ->add_option("--lock-timeout-ms", migrate_lock_timeout_ms,
                   "longest wait for a lock on outbox's tables (0: no limit); writers queue "
                   "behind a waiting migration")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3'600'000}));
  bool create_roles_too = false;
  migrate->add_flag("--create-roles", create_roles_too,
                    "also create the roles <schema>_writer, _relay, _inbox, _admin with exactly "
                    "the privileges each part needs (again after every upgrade)");

  RelayFlags relay_flags;
  auto* relay = app.add_subcommand("relay", "publish committed events to Kafka (polling relay)");
  relay->add_option("--db", relay_flags.db, "libpq connection string or URI");
  relay->add_option("--schema", relay_flags.schema, "schema holding outbox_events");
  relay->add_option("--kafka-brokers", relay_flags.brokers, "bootstrap servers host:port,...");
  relay->add_option("--kafka-property", relay_flags.properties, "librdkafka property key=value");
  relay->add_option("--kafka-properties-file", relay_flags.properties_file,
                    "librdkafka properties, key=value per line (for secrets: ps shows flags)");
  relay->add_option("--topic-template", relay_flags.topic_template,
                    "topic per event; {aggregate_type} and {event_type} are replaced");
  relay->add_option("--relay-id", relay_flags.relay_id,
                    "name in claimed_by (default host-pid-rand)");
  relay->add_option("--batch-size", relay_flags.batch_size, "rows per claim")
      ->check(CLI::Range(1, 100000));
  relay->add_option("--max-in-flight", relay_flags.max_in_flight, "sends awaiting an ack")
      ->check(CLI::Range(1, 1000000));
  relay
      ->add_option("--max-in-flight-bytes", relay_flags.max_in_flight_bytes,
                   "payload and header bytes the relay holds at most (claimed and awaiting an "
                   "ack; a larger row goes alone), e.g. 64MiB")
      ->capture_default_str();
  relay->add_option("--lease-ms", relay_flags.lease_ms, "claim lease")
      ->check(CLI::Range(100L, 3600000L));
  relay
      ->add_option("--backoff-base-ms", relay_flags.backoff_base_ms,
                   "first retry delay after a failed send")
      ->check(CLI::Range(1L, 3600000L));
  relay->add_option("--backoff-max-ms", relay_flags.backoff_max_ms, "longest retry delay")
      ->check(CLI::Range(1L, 86400000L));
  relay
      ->add_option("--max-attempts", relay_flags.max_attempts,
                   "failed sends before an event is quarantined (0: never)")
      ->check(CLI::Range(0, 1000000));

  relay
      ->add_option("--sink", relay_flags.sink,
                   "kafka, or discard: acknowledge every event at once without sending it "
                   "(measures the database side alone; nothing reaches a broker)")
      ->capture_default_str();
  relay->add_flag("--durable-marks", relay_flags.durable_marks,
                  "commit marks synchronously: after a PostgreSQL crash no topic shows an "
                  "aggregate's k+1 before a repeat of k (docs/GUARANTEES.md)");
  relay->add_option("--stats-every", relay_flags.stats_every,
                    "print a stats line (health, counts, last error) at this interval, e.g. 30s");

  auto* status = app.add_subcommand("status", "pending, in-flight and published counts");
  status->add_option("--db", db, "libpq connection string or URI");
  status->add_option("--schema", schema, "schema holding outbox_events");

  int mock_brokers = 3;
  int mock_partitions = 4;
  std::vector<std::string> mock_topics;
  QuarantineFlags quarantine_flags;
  auto* quarantine =
      app.add_subcommand("quarantine", "events set aside after failing: list, retry, skip");
  quarantine->require_subcommand(1);
  quarantine->add_option("--db", quarantine_flags.db, "libpq connection string or URI");
  quarantine->add_option("--schema", quarantine_flags.schema, "schema holding outbox_events");
  auto* q_list = quarantine->add_subcommand("list", "quarantined events, oldest first");
  q_list->add_flag("--json", quarantine_flags.json, "one JSON object per line");
  auto* q_retry =
      quarantine->add_subcommand("retry", "make events due again (fix the cause first)");
  q_retry->add_option("event_ids", quarantine_flags.event_ids, "event ids")->required();
  q_retry->add_option("--actor", quarantine_flags.actor, "who does this (default: $USER)");
  auto* q_skip =
      quarantine->add_subcommand("skip", "finish an event without publishing it (audited)");
  q_skip->add_option("event_id", quarantine_flags.event_ids, "event id")->required()->expected(1);
  q_skip->add_option("--reason", quarantine_flags.reason, "why it is skipped")->required();
  q_skip->add_option("--actor", quarantine_flags.actor, "who does this (default: $USER)");

  CleanupFlags cleanup_flags;
  auto* cleanup = app.add_subcommand(
      "cleanup", "delete events finished before the retention, and old inbox ids, in batches");
  cleanup->add_option("--db", cleanup_flags.db, "libpq connection string or URI");
  cleanup->add_option("--schema", cleanup_flags.schema, "schema holding outbox_events");
  cleanup
      ->add_option("--retention", cleanup_flags.retention,
                   "keep published and skipped events this long (the replay horizon)")
      ->capture_default_str();
  cleanup->add_option("--inbox-retention", cleanup_flags.inbox_retention,
                      "delete inbox ids older than this (at least --retention; default: keep)");
  cleanup->add_option("--batch-size", cleanup_flags.batch_size, "rows examined per transaction")
      ->check(CLI::Range(1, 1000000));
  cleanup->add_option("--pause", cleanup_flags.pause, "pause between batches, e.g. 50ms");
  cleanup->add_option("--every", cleanup_flags.every,
                      "repeat at this interval until stopped (default: once)");
  cleanup->add_flag("--dry-run", cleanup_flags.dry_run, "count what would be deleted");
  cleanup->add_flag("--allow-short-retention", cleanup_flags.allow_short_retention,
                    "accept a retention below 1h (tests only: events published moments ago go)");
  cleanup->add_flag("--json", cleanup_flags.json, "print the report as JSON");

  auto* mock =
      app.add_subcommand("kafka-mock", "run librdkafka's mock Kafka cluster until stopped");
  mock->add_option("--brokers", mock_brokers, "number of brokers")->check(CLI::Range(1, 64));
  mock->add_option("--topic", mock_topics,
                   "create this topic up front with --partitions partitions (repeatable)");
  mock->add_option("--partitions", mock_partitions,
                   "partitions of each --topic; each keeps at most 5 MiB, oldest dropped first")
      ->check(CLI::Range(1, 10000));

  auto* postgres = app.add_subcommand(
      "postgres", "run a private PostgreSQL cluster until stopped; prints its connection string");

  DemoOptions demo_options;
  auto* demo = app.add_subcommand("demo", "end-to-end demo on embedded PostgreSQL and Kafka");
  demo->add_option("--db", demo_options.database_url,
                   "use this database instead of an embedded one (schema outbox_demo is reset)");
  demo->add_option("--kafka-brokers", demo_options.kafka_brokers,
                   "use these brokers instead of the embedded mock cluster");
  demo->add_option("--orders", demo_options.orders, "orders to write")
      ->check(CLI::Range(1, 10000000));
  demo->add_option("--writers", demo_options.writers, "concurrent writer threads")
      ->check(CLI::Range(1, 64));
  demo->add_option("--relays", demo_options.relays, "concurrent relays")->check(CLI::Range(1, 16));
  demo->add_option("--rollback-percent", demo_options.rollback_percent,
                   "share of transactions rolled back on purpose")
      ->check(CLI::Range(0, 100));
  demo->add_flag("--json", demo_options.json, "print the report as one JSON object");
  demo->add_flag("--quiet", demo_options.quiet, "no progress lines");

  BenchOptions bench_options;
  auto* bench =
      app.add_subcommand("bench",
                         "measure producer overhead, backlog drain and commit→ack latency (see "
                         "docs/PERFORMANCE.md)");
  bench->add_option("--db", bench_options.database_url,
                    "use this database instead of an embedded one (schemas bench_* are reset)");
  bench->add_option("--kafka-brokers", bench_options.kafka_brokers,
                    "use these brokers instead of the embedded mock cluster");
  bench->add_option("--events", bench_options.events, "backlog size for ceiling and drain")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}))
      ->capture_default_str();
  bench->add_option("--aggregates", bench_options.aggregates, "aggregates in the backlog")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  bench->add_option("--payload-bytes", bench_options.payload_bytes, "approximate payload size")
      ->check(CLI::Range(80, 1000000))
      ->capture_default_str();
  bench
      ->add_option(
          "--shared-buffers", bench_options.shared_buffers,
          "the embedded PostgreSQL's shared_buffers (a tuned server's, not initdb's 128MB)")
      ->check([](const std::string& v) {
        return std::regex_match(v, std::regex("[0-9]+(kB|MB|GB|TB)"))
                   ? std::string()
                   : "--shared-buffers takes a size such as 128MB or 1GB, not \"" + v + "\"";
      })
      ->capture_default_str();
  bench
      ->add_option("--kafka-property", bench_options.kafka_properties,
                   "librdkafka property key=value for the relays (e.g. linger.ms=1)")
      ->check([](const std::string& v) {
        return v.find('=') == std::string::npos || v.front() == '='
                   ? "--kafka-property \"" + v + "\": expected key=value, e.g. linger.ms=1"
                   : std::string();
      });
  bench->add_option("--clients", bench_options.clients, "producer connections")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  bench->add_option("--seconds", bench_options.seconds, "per producer comparison and live rate")
      ->check(CLI::Range(0.5, 3600.0))
      ->capture_default_str();
  bench->add_option("--rates", bench_options.rates, "live offered rates (events/s); max follows")
      ->delimiter(',')
      ->check(CLI::Range(1, 10000000));
  bench->add_option("--relays", bench_options.relays, "relay processes for ceiling and drain")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  bench->add_option("--batch-size", bench_options.batch_size, "relay rows per claim")
      ->check(CLI::Range(1, 100000));
  bench->add_option("--max-in-flight", bench_options.max_in_flight, "relay send window")
      ->check(CLI::Range(1, 1000000));
  bench->add_flag("--durable-marks", bench_options.durable_marks,
                  "relays commit marks synchronously (relay --durable-marks)");
  bench->add_option("--only", bench_options.only, "producer, ceiling, drain, live (comma list)")
      ->delimiter(',');
  bench->add_option("--out", bench_options.out_dir, "folder for results.json, plots, relay logs")
      ->capture_default_str();

  std::string password_file;
  for (CLI::App* command : {migrate, relay, status, quarantine, cleanup}) {
    command->add_option("--db-password-file", password_file,
                        "the database password, from the first line of this file (default: "
                        "$OUTBOX_DATABASE_PASSWORD_FILE; libpq's PGPASSFILE works too)");
  }
  decimal_integers_only(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 quotes the arguments it could not place, and one may be a --db URI with its password
    // or a secret Kafka property.
    std::ostringstream out;
    std::ostringstream err;
    const int code = app.exit(e, out, err);
    const auto secrets = argument_secrets(argc, argv);
    std::cout << outbox::detail::scrub(out.str(), secrets);
    std::cerr << outbox::detail::scrub(err.str(), secrets);
    return code;
  }
  set_database_password_file(password_file);
  try {
    outbox::fault::arm_from_environment();  // tests only: the crash campaign arms the relays
    if (*migrate) return cmd_migrate(db, schema, migrate_lock_timeout_ms, create_roles_too);
    if (*relay) return cmd_relay(relay_flags);
    if (*status) return cmd_status(db, schema);
    if (*quarantine) {
      quarantine_flags.action = *q_list ? "list" : *q_retry ? "retry" : "skip";
      return run_quarantine(quarantine_flags);
    }
    if (*cleanup) return run_cleanup(cleanup_flags);
    if (*mock) return cmd_kafka_mock(mock_brokers, mock_partitions, mock_topics);
    if (*postgres) return cmd_postgres();
    if (*demo) return run_demo(demo_options);
    if (*bench) return run_bench(bench_options);
  } catch (const outbox::DatabaseError& e) {
    std::string hint;
    if (e.sqlstate() == "55P03") {
      hint =
          "; another session holds a lock on outbox's tables (LOCK TABLE, a migration, VACUUM "
          "FULL): find it in pg_locks and pg_stat_activity, then try again";
    } else if (e.sqlstate() == "57014") {
      hint = "; the statement ran out of time (statement_timeout)";
    }
    std::cerr << "outbox: " << e.what() << hint << (e.retryable() ? " (retryable)" : "") << "\n";
    return 2;
  } catch (const outbox::Error& e) {
    std::cerr << "outbox: " << e.what() << (e.retryable() ? " (retryable)" : "") << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "outbox: unexpected error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
