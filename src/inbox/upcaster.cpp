#include "outbox/upcaster.hpp"

#include <fmt/format.h>

#include <regex>

#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"

namespace outbox {

Upcasters& Upcasters::add(const std::string& event_type, std::int32_t from, Step step) {
  if (!step) throw InvalidArgument("upcaster: the step of " + event_type + " is empty");
  return put(event_type, from, std::move(step), {});
}

Upcasters& Upcasters::add_sql(const std::string& event_type, std::int32_t from,
                              std::string function) {
  static const std::regex kFunction(R"([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?)");
  if (!std::regex_match(function, kFunction)) {
    throw InvalidArgument(fmt::format(
        "upcaster: '{}' is no function name (schema.function: letters, digits and '_'); it is "
        "called with the payload as jsonb and returns the next version's",
        detail::printable(function)));
  }
  return put(event_type, from, nullptr, std::move(function));
}

Upcasters& Upcasters::put(const std::string& event_type, std::int32_t from, Step step,
                          std::string sql) {
  if (event_type.empty()) throw InvalidArgument("upcaster: the event type is empty");
  if (from < 1) {
    throw InvalidArgument("upcaster: versions start at 1; a step from " + std::to_string(from) +
                          " is never taken");
  }
  if (!steps_.try_emplace({event_type, from}, Entry{std::move(step), std::move(sql)}).second) {
    throw InvalidArgument(fmt::format("upcaster: {} has a step from version {} already",
                                      detail::printable(event_type), from));
  }
  return *this;
}

Upcasters& Upcasters::current(const std::string& event_type, std::int32_t version) {
  if (event_type.empty() || version < 1) {
    throw InvalidArgument("upcaster: a current version needs an event type and a version >= 1");
  }
  current_[event_type] = version;
  return *this;
}

std::optional<std::int32_t> Upcasters::current_version(const std::string& event_type) const {
  if (const auto it = current_.find(event_type); it != current_.end()) return it->second;
  std::optional<std::int32_t> highest;
  for (auto it = steps_.lower_bound({event_type, 0});
       it != steps_.end() && it->first.first == event_type; ++it) {
    highest = it->first.second + 1;
  }
  return highest;
}

std::string Upcasters::unknown(const ConsumedEvent& event) const {
  const auto target = current_version(event.event_type);
  if (!target || event.schema_version == *target) return {};
  if (event.schema_version > *target) {
    return fmt::format(
        "schema_version {} of {} is newer than this consumer knows ({}): deploy a consumer that "
        "knows it, then `outbox inbox release` the event",
        event.schema_version, detail::printable(event.event_type), *target);
  }
  for (std::int32_t v = std::max(event.schema_version, 1); v < *target; ++v) {
    if (!steps_.contains({event.event_type, v})) {
      return fmt::format("{} has no upcaster from schema_version {} (to reach {})",
                         detail::printable(event.event_type), v, *target);
    }
  }
  return {};
}

void Upcasters::upcast(ConsumedEvent& event, PGconn* conn) const {
  if (const std::string why = unknown(event); !why.empty()) throw InvalidArgument(why);
  const auto target = current_version(event.event_type);
  if (!target) return;
  event.schema_version = std::max(event.schema_version, 1);  // none given: the first
  while (event.schema_version < *target) {
    const std::int32_t from = event.schema_version;
    const Entry& entry = steps_.at({event.event_type, from});
    if (entry.step) {
      event.payload = entry.step(event.payload);
    } else {
      if (conn == nullptr) throw InvalidArgument("upcaster: a SQL step needs a connection");
      const auto result = pg::exec_prepared(conn, "SELECT (" + entry.sql + "($1::jsonb))::text",
                                            {event.payload.c_str()});
      if (result.rows() != 1 || result.is_null(0, 0)) {
        throw InvalidArgument(fmt::format("upcaster {} returned no payload for event {}", entry.sql,
                                          event.event_id.to_string()));
      }
      event.payload = result.text(0, 0);
    }
    event.schema_version = from + 1;
  }
}

}  // namespace outbox
