// `outbox enqueue`: makes events from the shell through the SQL producer, <schema>.enqueue()
// (migration 16), as any language's service would call it. One event from flags, or JSON lines
// from stdin, all in one transaction: every event commits or none does. Ids are made here (UUIDv7)
// unless given, so when the commit's outcome is unknown the ids say what to look for.

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "outbox/connection.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/event.hpp"
#include "outbox/producer.hpp"
#include "outbox/schema.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

struct EnqueueFlags {
  std::string db;
  std::string schema = SchemaName().name();
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string payload = "{}";
  std::string headers = "{}";
  int schema_version = 1;
  std::string deliver_after = "0";
  std::string event_id;
  std::string traceparent;
  bool from_stdin = false;
  bool json = false;
};

// One call's arguments, as text for the function's parameters. From stdin, `line` is the JSON
// object itself: the server takes the names, payload and headers out of it, so the payload is
// stored as written (no round trip through a double: 19.990 stays 19.990) and a name holding
// \u0000 is refused, not cut short.
struct Call {
  std::string where;  // "line N: " for a line of stdin
  std::string line;
  std::string aggregate_type, aggregate_id, event_type, payload, headers, traceparent;
  std::string schema_version = "1", deliver_after_ms = "0", event_id;
};

EventId event_id_or_new(const std::string& text, const std::string& where) {
  if (text.empty()) return EventId::generate();
  const std::optional<EventId> id = EventId::parse(text);
  if (!id) {
    throw InvalidArgument(
        fmt::format("enqueue: {}event_id \"{}\" is not a UUID", where, printable(text, 80)));
  }
  return *id;
}

Call call_from_flags(const EnqueueFlags& flags) {
  Call call;
  call.aggregate_type = flags.aggregate_type;
  call.aggregate_id = flags.aggregate_id;
  call.event_type = flags.event_type;
  call.payload = flags.payload;
  call.headers = flags.headers;
  call.traceparent = flags.traceparent;
  call.schema_version = std::to_string(flags.schema_version);
  call.deliver_after_ms = std::to_string(parse_duration(flags.deliver_after).count());
  call.event_id = event_id_or_new(flags.event_id, "--").to_string();
  return call;
}

// A line of stdin: {"aggregate_type", "aggregate_id", "event_type", "payload", and optionally
// "headers" (object), "schema_version" (number), "deliver_after" ("5m"), "event_id",
// "traceparent"}. Unknown keys are refused (a typo would drop a field).
Call call_from_line(const std::string& line, std::size_t number) {
  const std::string where = fmt::format("line {}: ", number);
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw InvalidArgument("enqueue: " + where +
                          "not a JSON object; give one event per line, e.g. "
                          R"({"aggregate_type":"order","aggregate_id":"o-1",)"
                          R"("event_type":"OrderPlaced","payload":{"total":42}})");
  }
  const auto text = [&](const char* key, bool required) -> std::string {
    if (!j.contains(key)) {
      if (required) throw InvalidArgument(fmt::format("enqueue: {}\"{}\" is missing", where, key));
      return {};
    }
    if (!j[key].is_string()) {
      throw InvalidArgument(fmt::format("enqueue: {}\"{}\" must be a string", where, key));
    }
    return j[key].get<std::string>();
  };
  static const char* const kKeys[] = {"aggregate_type", "aggregate_id", "event_type",
                                      "payload",        "headers",      "schema_version",
                                      "deliver_after",  "event_id",     "traceparent"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      throw InvalidArgument(fmt::format("enqueue: {}unknown key \"{}\" (known: {})", where,
                                        printable(key, 80), fmt::join(kKeys, ", ")));
    }
  }
  if (!j.contains("payload")) {
    throw InvalidArgument(fmt::format(R"(enqueue: {}"payload" is missing ({{}} for none))", where));
  }
  for (const char* name : {"aggregate_type", "aggregate_id", "event_type"}) text(name, true);
  text("traceparent", false);
  Call call;
  call.where = where;
  call.line = line;
  call.event_id = event_id_or_new(text("event_id", false), where).to_string();
  if (j.contains("schema_version")) {
    if (!j["schema_version"].is_number_integer()) {
      throw InvalidArgument("enqueue: " + where + "\"schema_version\" must be a whole number");
    }
    call.schema_version = std::to_string(j["schema_version"].get<std::int64_t>());
  }
  if (j.contains("deliver_after")) {
    call.deliver_after_ms = std::to_string(parse_duration(text("deliver_after", false)).count());
  }
  return call;
}

// The next event of stdin, or nothing at its end: each line at most kMaxEnqueueStatementBytes (a
// longer one is refused before it is all in memory); blank lines skipped. One line in memory at
// a time: the caller runs each as it is read.
std::optional<Call> next_call_from_stdin(std::size_t& number) {
  std::string line;
  for (;;) {
    line.clear();
    int ch = 0;
    while ((ch = std::cin.get()) != EOF && ch != '\n') {
      if (line.size() >= kMaxEnqueueStatementBytes) {
        throw InvalidArgument(
            fmt::format("enqueue: line {} is over {} MiB; store large documents "
                        "elsewhere and send a reference",
                        number + 1, kMaxEnqueueStatementBytes >> 20));
      }
      line.push_back(static_cast<char>(ch));
    }
    if (ch == EOF && line.empty()) return std::nullopt;
    ++number;
    if (line.find_first_not_of(" \t\r") != std::string::npos) return call_from_line(line, number);
    if (ch == EOF) return std::nullopt;
  }
}

// The function's refusal (22023) as the user's error, without PL/pgSQL's context lines.
[[noreturn]] void throw_refusal(PGresult* result, const std::string& where) {
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const std::string sqlstate = state != nullptr ? state : "";
  std::string message = where + (primary != nullptr ? primary : "the call failed");
  PQclear(result);
  if (sqlstate == "3F000" || sqlstate == "42883") {  // no such schema, no such function
    message +=
        " (no enqueue() there: run `outbox migrate` with this build first, or give the "
        "schema with --schema)";
  }
  if (sqlstate == "22023") throw InvalidArgument("enqueue: " + message);
  throw DatabaseError("enqueue: " + message, sqlstate, false);
}

// The event as written: its id, sequence and names (as the server read them).
struct Written {
  std::string event_id, sequence, aggregate_type, aggregate_id, event_type;
};

Written run_call(PGconn* conn, const SchemaName& schema, const Call& call) {
  const std::string interval = "::bigint * interval '1 millisecond'";
  std::string sql;
  std::vector<const char*> params;
  if (call.line.empty()) {
    sql = "SELECT e.event_id::text, e.aggregate_sequence::text, $1, $2, $3 FROM " +
          schema.quoted() + ".enqueue($1, $2, $3, $4::jsonb, $5::jsonb, $6::int, $7" + interval +
          ", $8::uuid, $9) AS e";
    params = {call.aggregate_type.c_str(),
              call.aggregate_id.c_str(),
              call.event_type.c_str(),
              call.payload.c_str(),
              call.headers.c_str(),
              call.schema_version.c_str(),
              call.deliver_after_ms.c_str(),
              call.event_id.c_str(),
              call.traceparent.empty() ? nullptr : call.traceparent.c_str()};
  } else {
    sql =
        "SELECT e.event_id::text, e.aggregate_sequence::text, l.d->>'aggregate_type', "
        "l.d->>'aggregate_id', l.d->>'event_type' FROM (SELECT $1::jsonb AS d) AS l, "
        "LATERAL " +
        schema.quoted() +
        ".enqueue(l.d->>'aggregate_type', l.d->>'aggregate_id', l.d->>'event_type', "
        "l.d->'payload', l.d->'headers', $2::int, $3" +
        interval + ", $4::uuid, l.d->>'traceparent') AS e";
    params = {call.line.c_str(), call.schema_version.c_str(), call.deliver_after_ms.c_str(),
              call.event_id.c_str()};
  }
  PGresult* result = PQexecParams(conn, sql.c_str(), static_cast<int>(params.size()), nullptr,
                                  params.data(), nullptr, nullptr, 0);
  if (PQresultStatus(result) != PGRES_TUPLES_OK) throw_refusal(result, call.where);
  Written row{PQgetvalue(result, 0, 0), PQgetvalue(result, 0, 1), PQgetvalue(result, 0, 2),
              PQgetvalue(result, 0, 3), PQgetvalue(result, 0, 4)};
  PQclear(result);
  return row;
}

void run_plain(PGconn* conn, const char* sql) {
  PGresult* result = PQexec(conn, sql);
  if (PQresultStatus(result) != PGRES_COMMAND_OK) throw_refusal(result, "");
  PQclear(result);
}

int run_enqueue(const EnqueueFlags& flags) {
  const bool event_flags =
      !flags.aggregate_type.empty() || !flags.aggregate_id.empty() || !flags.event_type.empty();
  if (flags.from_stdin && event_flags) {
    throw InvalidArgument(
        "enqueue: --stdin reads every event from stdin; leave out --aggregate-type, "
        "--aggregate-id and --event-type");
  }
  if (!flags.from_stdin && !event_flags) {
    throw InvalidArgument(
        "enqueue: say which event: --aggregate-type, --aggregate-id, --event-type and --payload, "
        "or --stdin with one JSON object per line");
  }
  const SchemaName schema(flags.schema);
  std::optional<Call> from_flags;
  if (!flags.from_stdin) from_flags = call_from_flags(flags);  // refused before connecting
  auto connection = open_cli_connection(flags.db, "outbox-enqueue");
  PGconn* conn = connection.get();
  // Names and sizes are UTF-8 (the C++ producer refuses any other client encoding).
  run_plain(conn, "SET client_encoding = 'UTF8'");
  run_plain(conn, "BEGIN");
  // Each line runs as it is read (a refused one ends the program, and the transaction with it:
  // nothing is written). What was written is said after the commit, which makes it true.
  std::vector<Written> written;
  if (from_flags) {
    written.push_back(run_call(conn, schema, *from_flags));
  } else {
    std::size_t number = 0;
    while (const std::optional<Call> call = next_call_from_stdin(number)) {
      written.push_back(run_call(conn, schema, *call));
    }
  }
  if (written.empty()) {
    run_plain(conn, "ROLLBACK");
    std::cerr << "enqueue: no events on stdin; nothing written" << std::endl;
    return 0;
  }
  PGresult* committed = PQexec(conn, "COMMIT");
  if (PQresultStatus(committed) != PGRES_COMMAND_OK) {
    const bool broken = PQstatus(conn) != CONNECTION_OK;
    PQclear(committed);
    if (broken) {
      throw DatabaseError(fmt::format("enqueue: the connection broke during COMMIT, so whether the "
                                      "{} event(s) were written is unknown; look for event {} "
                                      "(all or none of them committed) before running it again",
                                      written.size(), written.front().event_id),
                          "08006", false);
    }
    throw DatabaseError("enqueue: COMMIT failed; nothing was written", "", false);
  }
  PQclear(committed);
  for (const Written& w : written) {
    if (flags.json) {
      std::cout << nlohmann::json{{"event_id", w.event_id},
                                  {"aggregate_type", w.aggregate_type},
                                  {"aggregate_id", w.aggregate_id},
                                  {"event_type", w.event_type},
                                  {"aggregate_sequence", std::stoll(w.sequence)}}
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << fmt::format("enqueued {} of {} {}: sequence {}, event {}\n",
                               printable(w.event_type), printable(w.aggregate_type),
                               printable(w.aggregate_id), w.sequence, w.event_id);
    }
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

void register_enqueue(Commands& commands) {
  const auto [enqueue, flags] = commands.add(
      "enqueue", "write events through the SQL producer (one, or JSON lines from --stdin)",
      run_enqueue);
  Commands::add_database_options(enqueue, flags->db, flags->schema);
  enqueue->add_option("--aggregate-type", flags->aggregate_type, "e.g. order");
  enqueue->add_option("--aggregate-id", flags->aggregate_id, "e.g. o-1 (the Kafka message key)");
  enqueue->add_option("--event-type", flags->event_type, "e.g. OrderPlaced");
  enqueue->add_option("--payload", flags->payload, "a JSON document")->capture_default_str();
  enqueue->add_option("--headers", flags->headers, "a JSON object of string values")
      ->capture_default_str();
  enqueue->add_option("--schema-version", flags->schema_version, "the payload's version")
      ->capture_default_str();
  enqueue->add_option("--deliver-after", flags->deliver_after, "publish no earlier, e.g. 5m")
      ->capture_default_str();
  enqueue->add_option("--event-id", flags->event_id, "a UUID (default: a new UUIDv7)");
  enqueue->add_option("--traceparent", flags->traceparent, "a W3C trace context");
  enqueue->add_flag("--stdin", flags->from_stdin,
                    "one event per line of stdin, as a JSON object with the keys aggregate_type, "
                    "aggregate_id, event_type, payload, and optionally headers, schema_version, "
                    "deliver_after, event_id, traceparent; all in one transaction");
  enqueue->add_flag("--json", flags->json, "one JSON object per event written");
  commands.add_password_file_option(enqueue);
}

}  // namespace outbox::cli
