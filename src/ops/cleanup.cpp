#include "outbox/cleanup.hpp"

#include <fmt/format.h>

#include <thread>

#include "common/fault.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/duration.hpp"
#include "pg/connection.hpp"

namespace outbox {
namespace {

// One batch walks the next `batch_size` events in primary-key order from a cursor (UUIDv7 keys:
// roughly oldest first) and deletes those finished before the cutoff. Walking the key instead of
// searching for finished rows keeps every batch an index range scan that never revisits the dead
// rows of earlier batches, without an index on published_at that every mark would have to update.
// Every batch that deletes also raises the cleanup horizon to its cutoff, in its own transaction
// (resolve_commit must know that a missing event may have been deleted, not rolled back).
constexpr const char* kEventsBatch = R"SQL(WITH page AS (
  SELECT event_id FROM {events} WHERE event_id > $1::uuid AND event_id <= $4::uuid
  ORDER BY event_id LIMIT $2::bigint
){horizon}, doomed AS (
  {action} {events} e {using} page p
  WHERE e.event_id = p.event_id
    AND (e.published_at < now() - $3::bigint * interval '1 millisecond'
         OR e.skipped_at < now() - $3::bigint * interval '1 millisecond')
  {returning}
)
SELECT (SELECT event_id::text FROM page ORDER BY event_id DESC LIMIT 1),
       (SELECT count(*) FROM doomed))SQL";

// The inbox, the same way along its key (consumer_name, event_id).
constexpr const char* kInboxBatch = R"SQL(WITH page AS (
  SELECT consumer_name, event_id FROM {inbox}
  WHERE (consumer_name, event_id) > ($1::text, $2::uuid)
  ORDER BY consumer_name, event_id LIMIT $3::bigint
), last AS (
  SELECT consumer_name, event_id FROM page ORDER BY consumer_name DESC, event_id DESC LIMIT 1
), doomed AS (
  {action} {inbox} i {using} page p
  WHERE i.consumer_name = p.consumer_name AND i.event_id = p.event_id
    AND i.processed_at < now() - $4::bigint * interval '1 millisecond'
  {returning}
)
SELECT (SELECT consumer_name FROM last), (SELECT event_id::text FROM last),
       (SELECT count(*) FROM doomed))SQL";

// Inbox consumers (of this database) whose latest applied event is older than the cutoff: one
// unbatched pass over processed_events per cleanup run (no index has processed_at), so it is
// bounded by a statement timeout and only ever warns.
constexpr const char* kConsumersBehind = R"SQL(SELECT consumer_name, max(processed_at)::text
FROM {inbox} GROUP BY consumer_name
HAVING max(processed_at) < now() - $1::bigint * interval '1 millisecond'
ORDER BY consumer_name)SQL";

constexpr const char* kRaiseHorizon = R"SQL(, horizon AS (
  INSERT INTO {table} AS h (deleted_before) VALUES (now() - $3::bigint * interval '1 millisecond')
  ON CONFLICT (singleton) DO UPDATE
  SET deleted_before = greatest(h.deleted_before, excluded.deleted_before)
))SQL";

// A dry run selects what the batch would delete, from the same page and condition, and leaves the
// horizon alone.
std::string statement(const char* sql, const std::string& table, const char* table_key,
                      bool dry_run, const std::string& horizon_table = {}) {
  return fmt::format(fmt::runtime(sql), fmt::arg(table_key, table),
                     fmt::arg("action", dry_run ? "SELECT 1 FROM" : "DELETE FROM"),
                     fmt::arg("using", dry_run ? "," : "USING"),
                     fmt::arg("returning", dry_run ? "" : "RETURNING 1"),
                     fmt::arg("horizon", dry_run || horizon_table.empty()
                                             ? std::string()
                                             : fmt::format(fmt::runtime(kRaiseHorizon),
                                                           fmt::arg("table", horizon_table))));
}

}  // namespace

void check_cleanup_options(const CleanupOptions& options) {
  if (options.batch_size == 0 || options.batch_size > 1000000) {
    throw InvalidArgument(
        fmt::format("cleanup: batch_size must be 1 to 1000000, not {}", options.batch_size));
  }
  if (options.retention.count() < 0 || options.pause.count() < 0) {
    throw InvalidArgument("cleanup: retention and pause cannot be negative");
  }
  if (options.retention < kMinimumRetention && !options.allow_short_retention) {
    throw InvalidArgument(fmt::format(
        "cleanup: a retention of {} is below the minimum of {}: events published moments "
        "ago would be deleted, so a replay, an audit or resolve_commit could no longer find "
        "them. Keep at least an hour (the default is 7 days); tests may set "
        "allow_short_retention (--allow-short-retention)",
        format_duration(options.retention), format_duration(kMinimumRetention)));
  }
  if (options.inbox_retention && *options.inbox_retention < options.retention) {
    throw InvalidArgument(fmt::format(
        "cleanup: the inbox retention ({}) is shorter than the event retention ({}); a "
        "replay of an event still kept would then be applied twice. Keep inbox ids at least as "
        "long as events",
        format_duration(*options.inbox_retention), format_duration(options.retention)));
  }
}

namespace {

void check(PGconn* conn, const CleanupOptions& options) {
  if (conn == nullptr || PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(
        "cleanup needs an idle connection: it commits every batch in its own transaction");
  }
  check_cleanup_options(options);
}

// One batch in its own transaction; a crash at the fault point rolls the batch back.
pg::Result run_batch(PGconn* conn, const std::string& sql, const std::vector<const char*>& params) {
  pg::exec(conn, "BEGIN");
  try {
    auto result = pg::exec(conn, sql, params);
    OUTBOX_FAULT(fault::kCleanupMidBatch);
    pg::commit(conn, /*redo_is_safe=*/true);  // the batch is looked at again
    return result;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

// Best effort: a check that takes too long or fails is logged and the cleanup goes on.
void warn_of_consumers_behind(PGconn* conn, const CleanupOptions& options,
                              const std::string& retention, CleanupReport& report) {
  try {
    pg::exec(conn, "BEGIN");
    pg::exec(conn, "SET LOCAL statement_timeout = '30s'");
    const auto behind =
        pg::exec(conn,
                 fmt::format(fmt::runtime(kConsumersBehind),
                             fmt::arg("inbox", options.schema.table("processed_events"))),
                 {retention.c_str()});
    pg::exec(conn, "COMMIT");
    for (int row = 0; row < behind.rows(); ++row) {
      report.consumers_behind.push_back(
          {std::string(behind.text(row, 0)), std::string(behind.text(row, 1))});
      detail::log().warn(
          "cleanup: inbox consumer {} has applied nothing since {}, before the cutoff: events "
          "published since then are deleted although it may not have applied them; if it is "
          "behind rather than idle or retired, replay what it misses before the cleanup runs "
          "again (docs/OPERATIONS.md, OutboxConsumerOffsetGap)",
          detail::printable(report.consumers_behind.back().consumer),
          report.consumers_behind.back().last_applied_at);
    }
  } catch (const DatabaseError& error) {
    pg::rollback_quietly(conn);
    if (PQstatus(conn) != CONNECTION_OK) throw;
    detail::log().warn("cleanup: the look for inbox consumers behind the cutoff was skipped: {}",
                       detail::printable(error.what()));
  }
}

}  // namespace

CleanupReport cleanup(PGconn* conn, const CleanupOptions& options) {
  check(conn, options);
  CleanupReport report;
  const std::string batch = std::to_string(options.batch_size);
  const std::string retention = std::to_string(options.retention.count());
  auto pause = [&] {
    if (options.pause.count() > 0) std::this_thread::sleep_for(options.pause);
  };

  warn_of_consumers_behind(conn, options, retention, report);

  const std::string events_sql =
      statement(kEventsBatch, options.schema.table("outbox_events"), "events", options.dry_run,
                options.schema.table("outbox_cleanup_horizon"));
  // Events written while the cleanup runs are too young to be due: stop at today's newest key.
  const auto newest =
      pg::exec(conn, "SELECT event_id::text FROM " + options.schema.table("outbox_events") +
                         " ORDER BY event_id DESC LIMIT 1");
  const std::string last =
      newest.rows() == 1 ? std::string(newest.text(0, 0)) : "00000000-0000-0000-0000-000000000000";
  std::string cursor = "00000000-0000-0000-0000-000000000000";
  for (;;) {
    const auto result = run_batch(conn, events_sql,
                                  {cursor.c_str(), batch.c_str(), retention.c_str(), last.c_str()});
    ++report.batches;
    report.events_deleted += static_cast<std::uint64_t>(result.int64(0, 1));
    if (result.is_null(0, 0)) break;  // past the last event
    cursor = result.text(0, 0);
    pause();
  }

  if (options.inbox_retention) {
    const std::string inbox_sql =
        statement(kInboxBatch, options.schema.table("processed_events"), "inbox", options.dry_run);
    const std::string inbox_retention = std::to_string(options.inbox_retention->count());
    std::string consumer;  // '' sorts first
    std::string event = "00000000-0000-0000-0000-000000000000";
    for (;;) {
      const auto result =
          run_batch(conn, inbox_sql,
                    {consumer.c_str(), event.c_str(), batch.c_str(), inbox_retention.c_str()});
      ++report.batches;
      report.inbox_deleted += static_cast<std::uint64_t>(result.int64(0, 2));
      if (result.is_null(0, 0)) break;
      consumer = result.text(0, 0);
      event = result.text(0, 1);
      pause();
    }
  }
  return report;
}

}  // namespace outbox
