#include "outbox/redis_audit.hpp"

#include <fmt/format.h>

#include "common/printable.hpp"
#include "ops/audit_rows.hpp"
#include "outbox/error.hpp"
#include "redis/redis_common.hpp"
#include "sinks/key_template.hpp"

namespace outbox {
namespace {

constexpr const char* kPage = "1000";

// The template as a SCAN pattern: its text literal (glob characters escaped), each placeholder
// "*".
std::string scan_pattern(const std::string& stream_template) {
  std::string escaped;
  for (const char c : stream_template) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return detail::key_filter(escaped, "*");
}

// Every stream whose name the template's pattern matches.
std::vector<std::string> find_streams(redis::Connection& connection, const std::string& pattern,
                                      std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> streams;
  std::string cursor = "0";
  do {
    if (std::chrono::steady_clock::now() > deadline) {
      throw BrokerError("audit: the streams were not all found within the read timeout", 0, true);
    }
    const redis::Reply reply = connection.checked(
        {"SCAN", cursor, "MATCH", pattern, "COUNT", kPage, "TYPE", "stream"}, "audit: SCAN");
    cursor = redis::text(reply->element[0]);
    for (std::size_t i = 0; i < reply->element[1]->elements; ++i) {
      streams.push_back(redis::text(reply->element[1]->element[i]));
    }
  } while (cursor != "0");
  return streams;
}

// Appends the entries of `stream` from `from_ms` to its last entry now.
void read_stream(redis::Connection& connection, const std::string& stream, std::int64_t from_ms,
                 std::int64_t begin_ms, std::int64_t end_ms,
                 std::chrono::steady_clock::time_point deadline,
                 detail::AuditedMessages& messages) {
  const redis::Reply last =
      connection.checked({"XREVRANGE", stream, "+", "-", "COUNT", "1"}, "audit: XREVRANGE");
  if (last->elements == 0) return;
  const std::string end_id = redis::text(last->element[0]->element[0]);
  std::string start = std::to_string(std::max<std::int64_t>(from_ms, 0));
  for (;;) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw BrokerError("audit: stream " + detail::printable(stream) +
                            " not read to its end within the read timeout",
                        0, true);
    }
    const redis::Reply page = connection.checked({"XRANGE", stream, start, end_id, "COUNT", kPage},
                                                 "audit: XRANGE " + stream);
    for (std::size_t i = 0; i < page->elements; ++i) {
      const redisReply* item = page->element[i];
      const std::string id = redis::text(item->element[0]);
      const auto parsed = redis::parse_entry_id(id);
      const auto at_ms = static_cast<std::int64_t>(parsed ? parsed->first : 0);
      const ConsumedEvent event = redis::decode_entry(item->element[1]);
      messages.emplace_back(event.event_id, at_ms >= begin_ms && at_ms < end_ms);
      start = "(" + id;  // exclusive: after this one
    }
    if (page->elements < 1000) return;
  }
}

}  // namespace

AuditReport audit_redis_streams(const RedisAuditOptions& options) {
  detail::check_audit_window(options);
  try {
    detail::check_key_template(options.stream_template, "Redis stream", "--redis-partitions",
                               "outbox:{aggregate_type}:{partition}");
  } catch (const ConfigError& error) {
    throw InvalidArgument(error.what());
  }
  const redis::Endpoint endpoint = redis::parse_url(options.url);
  return detail::run_audit(
      options, [](const Event&) { return true; },
      [&](std::int64_t from_ms, std::int64_t begin_ms, std::int64_t end_ms) {
        redis::Connection connection(endpoint, std::chrono::milliseconds(5000));
        const auto deadline = std::chrono::steady_clock::now() + options.read_timeout;
        detail::AuditedMessages messages;
        for (const std::string& stream :
             find_streams(connection, scan_pattern(options.stream_template), deadline)) {
          read_stream(connection, stream, from_ms, begin_ms, end_ms, deadline, messages);
        }
        return messages;
      });
}

}  // namespace outbox
