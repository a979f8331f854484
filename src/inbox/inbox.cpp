#include "outbox/inbox.hpp"

#include "pg/connection.hpp"

namespace outbox {

Inbox::Inbox(SchemaName schema, std::string consumer_name)
    : schema_(std::move(schema)),
      consumer_name_(std::move(consumer_name)),
      insert_sql_("INSERT INTO " + schema_.table("processed_events") +
                  " (consumer_name, event_id) VALUES ($1, $2::uuid)"
                  " ON CONFLICT DO NOTHING RETURNING event_id") {
  if (consumer_name_.empty() || consumer_name_.size() > 255) {
    throw InvalidArgument("inbox consumer name must be 1..255 bytes; it scopes the dedup records");
  }
}

InboxResult Inbox::process(PGconn* conn, const EventId& event_id,
                           const std::function<void(PGconn*)>& effect) const {
  if (conn == nullptr) throw InvalidArgument("inbox: the connection is null");
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(
        "inbox: the connection must be idle; process() opens and commits its own transaction so "
        "the dedup record and the effect commit together");
  }
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
    if (PQtransactionStatus(conn) != PQTRANS_INTRANS) {
      throw InvalidArgument(
          "inbox: the effect ended or broke the transaction (it must not COMMIT or ROLLBACK, and "
          "must not swallow a failed statement); what was still open is rolled back");
    }
    pg::commit(conn);
    return InboxResult::applied;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

}  // namespace outbox
