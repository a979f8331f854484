// The gap-aware half of Inbox (InboxOrdering): batches in sequence order, operators' decisions,
// the count of held events. The per-aggregate rules are sequence_plan.cpp's; the statements are
// ordered_inbox.cpp's.

#include <fmt/format.h>

#include <set>

#include "inbox/ordered_inbox.hpp"
#include "outbox/inbox.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"
#include "schema/inbox_tables.hpp"

namespace outbox {
namespace {

void check_ordered(const Inbox& inbox, PGconn* conn) {
  if (!inbox.ordering().enabled) {
    throw InvalidArgument("inbox: process_in_order needs InboxOrdering::enabled");
  }
  if (conn == nullptr) throw InvalidArgument("inbox: the connection is null");
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    throw InvalidArgument(
        "inbox: the connection must be idle; the inbox opens and commits its own transaction so "
        "the dedup record and the effect commit together");
  }
}

void check_events(std::span<const ConsumedEvent> events) {
  for (const ConsumedEvent& event : events) {
    if (event.event_id.is_nil()) throw InvalidArgument("inbox: an event id is the nil UUID");
    if (event.aggregate_sequence <= 0) {
      throw InvalidArgument(
          "inbox: event " + event.event_id.to_string() +
          " has no aggregate sequence (it must be positive); a gap-aware inbox orders by it");
    }
  }
}

}  // namespace

OrderedBatchResult Inbox::process_in_order(PGconn* conn, std::span<const ConsumedEvent> events,
                                           const Effect& effect,
                                           const std::map<EventId, ParkRequest>& park,
                                           const UnknownVersion& unknown_version) const {
  check_ordered(*this, conn);
  check_events(events);
  OrderedBatchResult result;
  result.results.assign(events.size(), InboxResult::duplicate);
  if (events.empty()) return result;
  // The batch's aggregates, each once, in the order the batch first names it.
  std::vector<detail::AggregateKey> order;
  std::map<detail::AggregateKey, std::vector<detail::PlanEvent>> by_aggregate;
  for (const ConsumedEvent& event : events) {
    detail::AggregateKey key{event.aggregate_type, event.aggregate_id};
    if (by_aggregate.try_emplace(key).second) order.push_back(std::move(key));
  }
  pg::exec(conn, "BEGIN");
  try {
    detail::OrderedTransaction transaction(*this, conn, effect);
    transaction.park_unknown_versions(unknown_version);
    transaction.lock_and_load(order);
    // The events new to this consumer (each id once: the first delivery in the batch).
    std::set<EventId> seen = transaction.processed(events);
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (!seen.insert(events[i].event_id).second) continue;
      by_aggregate[{events[i].aggregate_type, events[i].aggregate_id}].push_back(
          {events[i].aggregate_sequence, false, i, false, detail::Decision::none, false});
    }
    detail::StepTally tally;
    for (const detail::AggregateKey& key : order) {
      transaction.run(key, by_aggregate[key], events, result.results, park, tally);
    }
    transaction.write();
    pg::commit(conn, /*redo_is_safe=*/true);  // a redelivery is found duplicate
    result.applied_from_held = tally.applied_from_held;
    result.decided = tally.decided;
    result.parked = std::move(tally.parked);
    return result;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

OrderedBatchResult Inbox::carry_out_decisions(PGconn* conn, const Effect& effect,
                                              const std::map<EventId, ParkRequest>& park,
                                              const UnknownVersion& unknown_version) const {
  check_ordered(*this, conn);
  pg::exec(conn, "BEGIN");
  detail::OrderedTransaction transaction(*this, conn, effect);
  transaction.park_unknown_versions(unknown_version);
  try {
    const auto keys = transaction.decided_aggregates(100);
    if (keys.empty()) {
      pg::rollback_quietly(conn);
      return {};
    }
    transaction.lock_and_load(keys);
    detail::StepTally tally;
    std::vector<InboxResult> none;
    for (const detail::AggregateKey& key : keys) {
      transaction.run(key, {}, {}, none, park, tally);
    }
    transaction.write();
    pg::commit(conn, /*redo_is_safe=*/true);
    OrderedBatchResult result;
    result.applied_from_held = tally.applied_from_held;
    result.decided = tally.decided;
    result.parked = std::move(tally.parked);
    return result;
  } catch (const std::exception& error) {
    pg::rollback_quietly(conn);
    const auto* database = dynamic_cast<const DatabaseError*>(&error);
    if (transaction.attempting() == nullptr || !transaction.attempting_decided() ||
        PQstatus(conn) != CONNECTION_OK || (database != nullptr && database->retryable())) {
      throw;  // a retry may do, or it is not the decided event's: counted as any failure
    }
    // Withdraw the decision, or the next round would fail the same way forever.
    const std::string id = transaction.attempting()->event_id.to_string();
    const std::string reason =
        std::string("released, and its effect failed again: ") + error.what();
    pg::exec(conn,
             "UPDATE " + schema_.table("inbox_parked") +
                 " SET decision = NULL, decided_by = NULL, kind = 'failed', reason = $3"
                 " WHERE consumer_name = $1 AND event_id = $2::uuid",
             {consumer_name_.c_str(), id.c_str(), reason.c_str()});
    throw;
  } catch (...) {
    pg::rollback_quietly(conn);
    throw;
  }
}

Inbox::Waiting Inbox::waiting(PGconn* conn) const {
  const auto counts = pg::exec_prepared(
      conn,
      fmt::format("SELECT count(*) FILTER (WHERE NOT {0}), count(*) FILTER (WHERE {0}) FROM {1}"
                  " WHERE consumer_name = $1",
                  detail::kHeldIsParked, schema_.table("inbox_parked")),
      {consumer_name_.c_str()});
  return {static_cast<std::uint64_t>(counts.int64(0, 0)),
          static_cast<std::uint64_t>(counts.int64(0, 1))};
}

}  // namespace outbox
