#include "quarantine_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "outbox/error.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {

namespace {

// "2026-12-02 20:50:42.630233+00" as "2026-12-02 20:50:42+00": a person reads seconds.
std::string to_the_second(const std::string& timestamp) {
  const std::size_t dot = timestamp.find('.');
  if (dot == std::string::npos) return timestamp;
  const std::size_t zone = timestamp.find_first_of("+-", dot);
  return timestamp.substr(0, dot) + (zone == std::string::npos ? "" : timestamp.substr(zone));
}

}  // namespace

std::string quarantined_text(const QuarantinedEvent& event) {
  using outbox::printable;
  return fmt::format("{}  {} {} #{} {}  {}, {} attempt{}, since {}; {} blocked behind it\n    {}\n",
                     event.event_id.to_string(), printable(event.aggregate_type),
                     printable(event.aggregate_id), event.aggregate_sequence,
                     printable(event.event_type), printable(event.reason), event.attempt_count,
                     event.attempt_count == 1 ? "" : "s",
                     printable(to_the_second(event.quarantined_at)), event.blocked_events,
                     printable(event.last_error));
}

std::string in_doubt_text(const InDoubtEvent& in) {
  using outbox::printable;
  const Event& event = in.event;
  return fmt::format(
      "{}  {} {} #{} {}  in doubt since {}, {} attempt{}; {} blocked behind it\n"
      "    {}\n",
      event.event_id.to_string(), printable(event.aggregate_type), printable(event.aggregate_id),
      event.aggregate_sequence, printable(event.event_type),
      printable(to_the_second(in.in_doubt_at)), event.attempt_count,
      event.attempt_count == 1 ? "" : "s", in.blocked_events, printable(in.reason));
}

std::string in_doubt_json(const InDoubtEvent& in) {
  const Event& event = in.event;
  const nlohmann::json object = {
      {"event_id", event.event_id.to_string()}, {"aggregate_type", event.aggregate_type},
      {"aggregate_id", event.aggregate_id},     {"aggregate_sequence", event.aggregate_sequence},
      {"event_type", event.event_type},         {"attempt_count", event.attempt_count},
      {"in_doubt_at", in.in_doubt_at},          {"reason", in.reason},
      {"blocked_events", in.blocked_events}};
  return object.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::vector<EventId> parse_event_ids(const std::vector<std::string>& texts,
                                     const std::string& list_command) {
  std::vector<EventId> ids;
  for (const std::string& text : texts) {
    const auto id = EventId::parse(text);
    if (!id) {
      throw InvalidArgument("\"" + outbox::printable(text) +
                            "\" is not an event id (a UUID such as "
                            "0190f5c2-7d3e-7a41-9c7e-2b1d4e5f6a7b); see `" +
                            list_command + "`");
    }
    if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  }
  return ids;
}

std::string quarantined_json(const QuarantinedEvent& event) {
  const nlohmann::json object = {{"event_id", event.event_id.to_string()},
                                 {"aggregate_type", event.aggregate_type},
                                 {"aggregate_id", event.aggregate_id},
                                 {"aggregate_sequence", event.aggregate_sequence},
                                 {"event_type", event.event_type},
                                 {"attempt_count", event.attempt_count},
                                 {"reason", event.reason},
                                 {"last_error", event.last_error},
                                 {"quarantined_at", event.quarantined_at},
                                 {"blocked_events", event.blocked_events}};
  // ensure_ascii: control characters are \u escapes anyway; C1 controls and bidirectional
  // overrides become escapes too. A byte that is not UTF-8 (a SQL_ASCII database) becomes
  // U+FFFD instead of an exception.
  return object.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace) +
         "\n";
}

}  // namespace outbox::cli
