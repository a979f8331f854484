#include "outbox/wait_published.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <thread>

#include "outbox/duration.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

// Columns:                 0          1                          2
constexpr const char* kState = R"SQL(
SELECT event_id, published_at IS NOT NULL,
       quarantined_at IS NOT NULL OR skipped_at IS NOT NULL OR in_doubt_at IS NOT NULL
FROM {events} WHERE event_id = ANY($1::uuid[]))SQL";

}  // namespace

PublishWait wait_published(PGconn* conn, const SchemaName& schema,
                           std::span<const EventId> event_ids, const WaitOptions& options) {
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(
        "wait_published: the connection must be idle: wait after COMMIT (no relay sees an "
        "event before its transaction commits)");
  }
  const std::chrono::milliseconds longest = std::chrono::days(kMaxDurationDays);
  if (options.timeout.count() < 0 || options.first_poll.count() <= 0 ||
      options.max_poll < options.first_poll || options.timeout > longest ||
      options.max_poll > longest) {
    throw InvalidArgument(
        "wait_published: the timeout must be 0 to 3650 days, first_poll positive and max_poll "
        "from first_poll to 3650 days");
  }
  std::set<EventId> left;
  for (const EventId& id : event_ids) {
    if (id.is_nil()) throw InvalidArgument("wait_published: an event id is the nil UUID");
    left.insert(id);
  }
  PublishWait result;
  const std::string sql =
      fmt::format(fmt::runtime(kState), fmt::arg("events", schema.table("outbox_events")));
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  auto pause = options.first_poll;
  while (!left.empty()) {
    const std::vector<EventId> ids(left.begin(), left.end());
    const std::string array = pg::uuid_array(ids);
    const auto rows = pg::exec_prepared(conn, sql, {array.c_str()});
    ++result.polls;
    std::set<EventId> seen;
    for (int row = 0; row < rows.rows(); ++row) {
      const auto id = EventId::parse(rows.text(row, 0));
      if (!id) continue;
      seen.insert(*id);
      if (rows.text(row, 1) == "t") {
        result.published.push_back(*id);
        left.erase(*id);
      } else if (rows.text(row, 2) == "t") {
        result.stopped.push_back(*id);
        left.erase(*id);
      }
    }
    for (const EventId& id : ids) {
      if (!seen.contains(id)) {
        result.not_found.push_back(id);
        left.erase(id);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (left.empty() || now >= deadline) break;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, options.max_poll);
  }
  result.waiting.assign(left.begin(), left.end());
  return result;
}

}  // namespace outbox
