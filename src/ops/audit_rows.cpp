// The PostgreSQL side of every destination's audit (outbox/audit.hpp): the window, the rows of
// it, what the destination held against them, phantoms and the inbox.

#include "ops/audit_rows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox::detail {
namespace {

struct IdHash {
  std::size_t operator()(const EventId& id) const {
    std::size_t h = 0;
    for (const std::uint8_t b : id.bytes()) h = h * 131 + b;
    return h;
  }
};

struct Row {
  EventId id;
  bool published = false;
  bool skipped = false;
};

using RowsById = std::unordered_map<EventId, Row, IdHash>;

// The window in epoch milliseconds, as PostgreSQL reads the text.
std::pair<std::int64_t, std::int64_t> window_ms(PGconn* conn, const AuditWindow& options) {
  try {
    const auto result = pg::exec(
        conn,
        "SELECT (extract(epoch FROM $1::timestamptz) * 1000)::bigint, "
        "(extract(epoch FROM coalesce(nullif($2::text, '')::timestamptz, now())) * 1000)::bigint",
        {options.since.c_str(), options.until.c_str()});
    return {result.int64(0, 0), result.int64(0, 1)};
  } catch (const DatabaseError& error) {
    if (error.sqlstate().rfind("22", 0) == 0) {
      throw InvalidArgument(fmt::format(
          "audit: since \"{}\" / until \"{}\" must be timestamps PostgreSQL reads, such as "
          "2026-12-01T18:00:00Z ({})",
          options.since, options.until, error.what()));
    }
    throw;
  }
}

// Refuses an empty window, and one that starts before the cleanup horizon.
void check_window(PGconn* conn, const AuditWindow& options, std::int64_t begin_ms,
                  std::int64_t end_ms) {
  if (end_ms <= begin_ms) {
    throw InvalidArgument(fmt::format(
        "audit: the window is empty: until \"{}\" is not after since \"{}\"; give an --until "
        "later than --since (or none: now)",
        options.until.empty() ? "now" : options.until, options.since));
  }
  // Rows before the cleanup horizon are deleted: their messages would all read as phantoms.
  const auto horizon =
      pg::exec(conn,
               "SELECT deleted_before::text, $1::timestamptz < deleted_before FROM " +
                   options.schema.table("outbox_cleanup_horizon"),
               {options.since.c_str()});
  if (horizon.rows() == 1 && horizon.text(0, 1) == "t") {
    throw InvalidArgument(fmt::format(
        "audit: the window starts before the cleanup horizon ({}): rows published before it "
        "were deleted by outbox cleanup, so their messages would all read as phantoms; audit "
        "from {} on",
        horizon.text(0, 0), horizon.text(0, 0)));
  }
}

// The rows of the window that `belongs` chooses, counted in `report`.
RowsById window_rows(PGconn* conn, const AuditWindow& options, const RowFilter& belongs,
                     AuditReport& report) {
  const auto rows =
      pg::exec(conn,
               "SELECT event_id::text, aggregate_type, event_type, published_at IS NOT NULL, "
               "skipped_at IS NOT NULL FROM " +
                   options.schema.table("outbox_events") +
                   " WHERE occurred_at >= $1::timestamptz"
                   " AND occurred_at < coalesce(nullif($2::text, '')::timestamptz, now())",
               {options.since.c_str(), options.until.c_str()});
  RowsById chosen;
  for (int i = 0; i < rows.rows(); ++i) {
    Event probe;
    probe.aggregate_type = rows.text(i, 1);
    probe.event_type = rows.text(i, 2);
    if (!belongs(probe)) continue;
    Row row;
    row.id = EventId::parse(rows.text(i, 0)).value_or(EventId{});
    row.published = rows.text(i, 3) == "t";
    row.skipped = rows.text(i, 4) == "t";
    ++report.rows;
    if (row.skipped) {
      ++report.skipped;
    } else if (row.published) {
      ++report.published;
    } else {
      ++report.pending;
    }
    chosen.emplace(row.id, row);
  }
  return chosen;
}

// The topic's messages against the rows: counts, duplicates and lost rows into `report`; returns
// the ids produced in the window that no row of the window has.
std::vector<EventId> compare_messages(const AuditedMessages& read, const RowsById& chosen,
                                      AuditReport& report) {
  std::unordered_map<EventId, std::int64_t, IdHash> copies;
  std::vector<EventId> unknown;  // produced in the window, no row of the window
  std::unordered_set<EventId, IdHash> seen_unknown;
  for (const auto& [id, in_window] : read) {
    ++report.messages;
    if (id.is_nil()) {
      ++report.foreign;
      continue;
    }
    // Any copy produced in the window, not only the first (which may be in the slack before it).
    ++copies[id];
    if (in_window && !chosen.contains(id) && seen_unknown.insert(id).second) {
      unknown.push_back(id);
    }
  }
  for (const auto& [id, n] : copies) {
    if (n > 1) report.duplicated.emplace_back(id, n);
  }
  for (const auto& [id, row] : chosen) {
    if (row.published && !copies.contains(id)) report.lost.push_back(id);
  }
  return unknown;
}

// A message of the window without a row of the window may be an event that occurred before
// it (published late): only one with no row at all is a phantom.
void find_phantoms(PGconn* conn, const AuditWindow& options, const std::vector<EventId>& unknown,
                   AuditReport& report) {
  if (unknown.empty()) return;
  const std::string ids = pg::uuid_array(unknown);
  const auto known =
      pg::exec(conn,
               "SELECT event_id::text FROM " + options.schema.table("outbox_events") +
                   " WHERE event_id = ANY ($1::uuid[])",
               {ids.c_str()});
  std::unordered_set<EventId, IdHash> exists;
  for (int i = 0; i < known.rows(); ++i) {
    exists.insert(EventId::parse(known.text(i, 0)).value_or(EventId{}));
  }
  for (const EventId& id : unknown) {
    if (!exists.contains(id)) report.phantom.push_back(id);
  }
}

// The published rows the consumer's inbox has not applied.
void find_not_applied(PGconn* conn, const AuditWindow& options, const RowsById& chosen,
                      AuditReport& report) {
  report.consumer_known =
      pg::exec(conn,
               "SELECT EXISTS (SELECT 1 FROM " + options.schema.table("processed_events") +
                   " WHERE consumer_name = $1)",
               {options.consumer->c_str()})
          .text(0, 0) == "t";
  std::vector<EventId> published;
  for (const auto& [id, row] : chosen) {
    if (row.published) published.push_back(id);
  }
  if (published.empty()) return;
  const std::string ids = pg::uuid_array(published);
  const auto missing =
      pg::exec(conn,
               "SELECT id::text FROM unnest($1::uuid[]) AS id WHERE NOT EXISTS (SELECT 1 FROM " +
                   options.schema.table("processed_events") +
                   " p WHERE p.consumer_name = $2 AND p.event_id = id)",
               {ids.c_str(), options.consumer->c_str()});
  for (int i = 0; i < missing.rows(); ++i) {
    report.not_applied.push_back(EventId::parse(missing.text(i, 0)).value_or(EventId{}));
  }
}

}  // namespace

void check_audit_window(const AuditWindow& options) {
  if (options.since.empty()) throw InvalidArgument("audit needs a start (since)");
  check_duration_range(options.read_timeout, std::chrono::seconds(1), std::chrono::hours(24),
                       "audit: a read timeout (--read-timeout)");
  check_duration_range(options.broker_slack, std::chrono::milliseconds(0), std::chrono::days(7),
                       "audit: a broker slack (--slack)",
                       "it only covers clock skew and produce delay");
}

AuditReport run_audit(const AuditWindow& options, const RowFilter& belongs,
                      const DestinationReader& read_destination) {
  check_audit_window(options);
  auto connection = pg::Connection::open(options.database_url, "outbox-audit");
  PGconn* conn = connection.get();
  const auto [begin_ms, end_ms] = window_ms(conn, options);
  check_window(conn, options, begin_ms, end_ms);
  AuditReport report;
  const RowsById chosen = window_rows(conn, options, belongs, report);
  // Not below 0: -1 and -2 are "the end" and "the beginning" to a Kafka timestamp lookup.
  const std::int64_t from_ms = std::max<std::int64_t>(0, begin_ms - options.broker_slack.count());
  const AuditedMessages read = read_destination(from_ms, begin_ms, end_ms);
  const std::vector<EventId> unknown = compare_messages(read, chosen, report);
  find_phantoms(conn, options, unknown, report);
  if (options.consumer) find_not_applied(conn, options, chosen, report);
  report.table_less_registered =
      pg::exec(conn, "SELECT count(*) FROM " + options.schema.table("outbox_table_less_slots"))
          .int64(0, 0) > 0;
  for (auto* ids : {&report.lost, &report.phantom, &report.not_applied}) {
    std::sort(ids->begin(), ids->end());
  }
  std::sort(report.duplicated.begin(), report.duplicated.end());
  return report;
}

}  // namespace outbox::detail
