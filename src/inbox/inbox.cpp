#include "outbox/inbox.hpp"

#include <set>

#include "outbox/duration.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox {

Inbox::Inbox(SchemaName schema, std::string consumer_name, InboxOrdering ordering)
    : schema_(std::move(schema)),
      consumer_name_(std::move(consumer_name)),
      ordering_(ordering),
      insert_sql_("INSERT INTO " + schema_.table("processed_events") +
                  " (consumer_name, event_id) VALUES ($1, $2::uuid)"
                  " ON CONFLICT DO NOTHING RETURNING event_id"),
      insert_batch_sql_("INSERT INTO " + schema_.table("processed_events") +
                        " (consumer_name, event_id) SELECT $1, id FROM unnest($2::uuid[]) AS u(id)"
                        " ON CONFLICT DO NOTHING RETURNING event_id") {
  if (consumer_name_.empty() || consumer_name_.size() > 255) {
    throw InvalidArgument("inbox consumer name must be 1..255 bytes; it scopes the dedup records");
  }
  if (ordering_.park_after.count() < 0 || ordering_.park_failing_after < 0 ||
      ordering_.park_after > std::chrono::days(kMaxDurationDays)) {
    throw InvalidArgument(
        "inbox ordering: park_after must be 0 to 3650 days and park_failing_after not negative "
        "(0 parks a held event at once, and never parks a failing effect)");
  }
}

namespace {

void check_idle(PGconn* conn) {
  if (conn == nullptr) throw InvalidArgument("inbox: the connection is null");
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(
        "inbox: the connection must be idle; process() opens and commits its own transaction so "
        "the dedup record and the effect commit together");
  }
}

void check_effect_left_transaction_open(PGconn* conn) {
  if (PQtransactionStatus(conn) != PQTRANS_INTRANS) {
    throw InvalidArgument(
        "inbox: the effect ended or broke the transaction (it must not COMMIT or ROLLBACK, and "
        "must not swallow a failed statement); what was still open is rolled back");
  }
}

}  // namespace

InboxResult Inbox::process(PGconn* conn, const EventId& event_id,
                           const std::function<void(PGconn*)>& effect) const {
  check_idle(conn);
  if (event_id.is_nil()) throw InvalidArgument("inbox: the event id is the nil UUID");
  const std::string id = event_id.to_string();
  pg::exec(conn, "BEGIN");
  try {
    const auto inserted = pg::exec(conn, insert_sql_, {consumer_name_.c_str(), id.c_str()});
    if (inserted.rows() == 0) {
      pg::rollback_quietly(conn);
      return InboxResult::duplicate;
    }
    effect(conn);
    check_effect_left_transaction_open(conn);
    pg::commit(conn, /*redo_is_safe=*/true);  // a redelivery is found duplicate
    return InboxResult::applied;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

std::vector<InboxResult> Inbox::process_batch(
    PGconn* conn, std::span<const EventId> event_ids,
    const std::function<void(PGconn*, std::size_t)>& effect) const {
  check_idle(conn);
  std::vector<InboxResult> results(event_ids.size(), InboxResult::duplicate);
  if (event_ids.empty()) return results;
  for (const EventId& id : event_ids) {
    if (id.is_nil()) throw InvalidArgument("inbox: an event id is the nil UUID");
  }
  const std::string ids = pg::uuid_array(event_ids);
  pg::exec(conn, "BEGIN");
  try {
    const auto inserted = pg::exec(conn, insert_batch_sql_, {consumer_name_.c_str(), ids.c_str()});
    std::set<EventId> fresh;
    for (int row = 0; row < inserted.rows(); ++row) {
      if (auto id = EventId::parse(inserted.text(row, 0))) fresh.insert(*id);
    }
    for (std::size_t i = 0; i < event_ids.size(); ++i) {
      if (fresh.erase(event_ids[i]) == 0) continue;  // seen before, or earlier in this batch
      effect(conn, i);
      check_effect_left_transaction_open(conn);
      results[i] = InboxResult::applied;
    }
    if (inserted.rows() == 0) {
      pg::rollback_quietly(conn);
    } else {
      pg::commit(conn, /*redo_is_safe=*/true);  // a redelivery is found duplicate
    }
    return results;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

}  // namespace outbox
