#include "outbox/sql_effect.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "common/json_text.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

// A JSON string of `text`; bytes that are not UTF-8 become U+FFFD (a hostile message's).
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

SqlEffect::SqlEffect(std::string statement) : statement_(std::move(statement)) {
  if (statement_.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InvalidArgument(
        "--apply is empty: name the statement that applies an event, e.g. "
        "\"SELECT app.apply_order_event($1)\" ($1 is the event as jsonb)");
  }
  static const std::regex kParameter(R"(\$([0-9]+))");
  bool first = false;
  for (auto it = std::sregex_iterator(statement_.begin(), statement_.end(), kParameter);
       it != std::sregex_iterator(); ++it) {
    if ((*it)[1] == "1") {
      first = true;
    } else {
      throw InvalidArgument(fmt::format(
          "--apply names ${}: the statement gets one parameter, $1, the event as jsonb (its "
          "payload is $1->'payload', its id $1->>'event_id')",
          (*it)[1].str()));
    }
  }
  if (!first) {
    throw InvalidArgument(
        "--apply does not use $1, the event as jsonb: a statement that ignores the event applies "
        "nothing of it");
  }
  // Typed where it is used, so `$1->'payload'` and an overloaded function resolve as jsonb.
  typed_ = std::regex_replace(statement_, std::regex(R"(\$1)"), "($$1::jsonb)");
}

void SqlEffect::check(PGconn* conn) const {
  const std::string name = "outbox_consume_check";
  const Oid jsonb = 3802;  // pg_type.oid of jsonb, fixed since PostgreSQL 9.4
  pg::Result prepared(PQprepare(conn, name.c_str(), typed_.c_str(), 1, &jsonb));
  if (PQresultStatus(prepared.get()) != PGRES_COMMAND_OK) {
    throw ConfigError(fmt::format(
        "--apply: PostgreSQL refuses the statement: {}check its text, that the function exists "
        "in the database the consumer uses, and that the consumer's role may call it",
        PQresultErrorMessage(prepared.get())));
  }
  pg::exec(conn, "DEALLOCATE " + name);
}

std::string SqlEffect::event_json(const ConsumedEvent& e) {
  return fmt::format(
      R"({{"event_id":{},"aggregate_type":{},"aggregate_id":{},"aggregate_sequence":{},)"
      R"("event_type":{},"schema_version":{},"payload":{},"traceparent":{},"topic":{},)"
      R"("partition":{},"offset":{}}})",
      quoted(e.event_id.to_string()), quoted(e.aggregate_type), quoted(e.aggregate_id),
      e.aggregate_sequence, quoted(e.event_type), e.schema_version, e.payload,
      quoted(e.traceparent), quoted(e.topic), e.partition, e.offset);
}

void SqlEffect::operator()(PGconn* conn, const ConsumedEvent& event) const {
  if (const std::string problem = detail::check_jsonb_document(event.payload); !problem.empty()) {
    throw InvalidArgument(fmt::format("event {}: its payload {}; it cannot be handed to --apply",
                                      event.event_id.to_string(), problem));
  }
  const std::string json = event_json(event);
  pg::exec_prepared(conn, typed_, {json.c_str()});
}

}  // namespace outbox
