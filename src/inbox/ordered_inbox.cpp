#include "inbox/ordered_inbox.hpp"

#include <fmt/format.h>

#include <set>

#include "pg/array_literal.hpp"
#include "pg/connection.hpp"

namespace outbox::detail {
namespace {

// The aggregates' rows are made first (no position: NULL) so that a twin consumer's transaction
// on a new aggregate waits for this one's commit instead of both reading "none", then locked in
// one order, so two twins never lock two aggregates the other way round.
constexpr const char* kMakeAggregates = R"SQL(
INSERT INTO {agg} (consumer_name, aggregate_type, aggregate_id)
SELECT $1, t, i FROM unnest($2::text[], $3::text[]) AS u(t, i) ORDER BY t, i
ON CONFLICT DO NOTHING)SQL";

constexpr const char* kLockAggregates = R"SQL(
SELECT a.aggregate_type, a.aggregate_id, a.last_sequence
FROM {agg} a JOIN unnest($2::text[], $3::text[]) AS u(t, i)
  ON a.aggregate_type = u.t AND a.aggregate_id = u.i
WHERE a.consumer_name = $1
ORDER BY 1, 2
FOR UPDATE OF a)SQL";

// Columns:                 0         1               2             3
constexpr const char* kLoadHeld = R"SQL(
SELECT p.event_id, p.aggregate_type, p.aggregate_id, p.aggregate_sequence,
--       4             5                 6                        7              8
       p.event_type, p.schema_version, encode(p.payload, 'hex'), p.traceparent, p.topic,
--       9            10          11      12
       p.partition, p."offset", p.kind, coalesce(p.decision, '')
FROM {parked} p JOIN unnest($2::text[], $3::text[]) AS u(t, i)
  ON p.aggregate_type = u.t AND p.aggregate_id = u.i
WHERE p.consumer_name = $1
FOR UPDATE OF p)SQL";

// Decisions a parked row without one holds back wait for it (sequence_plan.hpp): left out, so
// that they neither take the round every second nor crowd out the ones that can go.
constexpr const char* kDecidedAggregates = R"SQL(
SELECT DISTINCT p.aggregate_type, p.aggregate_id FROM {parked} p
WHERE p.consumer_name = $1 AND p.decision IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM {parked} b
                  WHERE b.consumer_name = p.consumer_name AND b.aggregate_type = p.aggregate_type
                    AND b.aggregate_id = p.aggregate_id
                    AND b.aggregate_sequence < p.aggregate_sequence
                    AND b.kind <> 'waiting' AND b.decision IS NULL)
LIMIT $2)SQL";

constexpr const char* kMovePositions = R"SQL(
UPDATE {agg} a SET last_sequence = u.s
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(t, i, s)
WHERE a.consumer_name = $1 AND a.aggregate_type = u.t AND a.aggregate_id = u.i)SQL";

constexpr const char* kInsertHeld = R"SQL(
INSERT INTO {parked} (consumer_name, event_id, aggregate_type, aggregate_id, aggregate_sequence,
  event_type, schema_version, payload, traceparent, topic, partition, "offset", kind, reason,
  park_at)
SELECT $1, u.id, u.t, u.i, u.s, u.et, u.v, u.p, u.tp, u.topic, u.part, u.off, u.k, u.r,
  now() + CASE WHEN u.k = 'waiting' THEN $15::bigint * interval '1 millisecond'
               ELSE interval '0' END
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::integer[],
            $8::bytea[], $9::text[], $10::text[], $11::integer[], $12::bigint[], $13::text[],
            $14::text[]) AS u(id, t, i, s, et, v, p, tp, topic, part, off, k, r)
ON CONFLICT DO NOTHING)SQL";

constexpr const char* kParkHeld = R"SQL(
UPDATE {parked} SET kind = $4, reason = $3, park_at = now(), decision = NULL, decided_by = NULL
WHERE consumer_name = $1 AND event_id = $2::uuid)SQL";

constexpr const char* kDeleteHeld = R"SQL(
DELETE FROM {parked} WHERE consumer_name = $1 AND event_id = ANY($2::uuid[]))SQL";

constexpr const char* kSeen = R"SQL(
SELECT event_id FROM {processed} WHERE consumer_name = $1 AND event_id = ANY($2::uuid[]))SQL";

constexpr const char* kProcessed = R"SQL(
INSERT INTO {processed} (consumer_name, event_id) SELECT $1, id FROM unnest($2::uuid[]) AS u(id)
ON CONFLICT DO NOTHING)SQL";

std::string sql(const char* text, const SchemaName& schema) {
  return fmt::format(fmt::runtime(text), fmt::arg("agg", schema.table("inbox_aggregates")),
                     fmt::arg("parked", schema.table("inbox_parked")),
                     fmt::arg("processed", schema.table("processed_events")));
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex = "\\x";
  hex.reserve(2 + bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    hex += kDigits[b >> 4];
    hex += kDigits[b & 0xf];
  }
  return hex;
}

std::string from_hex(std::string_view hex) {
  const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1]));
  }
  return bytes;
}

// The keys as two text[] parameters.
std::pair<std::string, std::string> key_arrays(const std::vector<AggregateKey>& keys) {
  pg::ArrayLiteral types;
  pg::ArrayLiteral ids;
  for (const AggregateKey& key : keys) {
    types.add(key.type);
    ids.add(key.id);
  }
  return {types.text(), ids.text()};
}

Decision decision_of(std::string_view text) {
  if (text == "release") return Decision::release;
  if (text == "skip") return Decision::skip;
  return Decision::none;
}

}  // namespace

OrderedTransaction::OrderedTransaction(const Inbox& inbox, PGconn* conn,
                                       const Inbox::Effect& effect)
    : inbox_(inbox), conn_(conn), effect_(effect) {}

std::vector<AggregateKey> OrderedTransaction::decided_aggregates(int limit) {
  const std::string text = std::to_string(limit);
  const auto rows = pg::exec_prepared(conn_, sql(kDecidedAggregates, inbox_.schema()),
                                      {inbox_.consumer_name().c_str(), text.c_str()});
  std::vector<AggregateKey> keys;
  for (int row = 0; row < rows.rows(); ++row) {
    keys.push_back({std::string(rows.text(row, 0)), std::string(rows.text(row, 1))});
  }
  return keys;
}

void OrderedTransaction::lock_and_load(std::vector<AggregateKey> keys) {
  const auto [types, ids] = key_arrays(keys);
  const std::vector<const char*> params{inbox_.consumer_name().c_str(), types.c_str(), ids.c_str()};
  pg::exec_prepared(conn_, sql(kMakeAggregates, inbox_.schema()), params);
  const auto locked = pg::exec_prepared(conn_, sql(kLockAggregates, inbox_.schema()), params);
  for (int row = 0; row < locked.rows(); ++row) {
    AggregateKey key{std::string(locked.text(row, 0)), std::string(locked.text(row, 1))};
    positions_[std::move(key)] =
        locked.is_null(row, 2) ? std::nullopt : std::optional<std::int64_t>(locked.int64(row, 2));
  }
  const auto held = pg::exec_prepared(conn_, sql(kLoadHeld, inbox_.schema()), params);
  for (int row = 0; row < held.rows(); ++row) {
    Held h;
    ConsumedEvent& e = h.event;
    e.event_id = EventId::parse(held.text(row, 0)).value_or(EventId{});
    e.aggregate_type = held.text(row, 1);
    e.aggregate_id = held.text(row, 2);
    e.aggregate_sequence = held.int64(row, 3);
    e.event_type = held.text(row, 4);
    e.schema_version = static_cast<std::int32_t>(held.int64(row, 5));
    e.payload = from_hex(held.text(row, 6));
    e.traceparent = held.text(row, 7);
    e.topic = held.text(row, 8);
    e.partition = static_cast<std::int32_t>(held.int64(row, 9));
    e.offset = held.int64(row, 10);
    h.blocking = held.text(row, 11) != "waiting";
    h.decision = decision_of(held.text(row, 12));
    held_[{e.aggregate_type, e.aggregate_id}].push_back(std::move(h));
  }
}

std::set<EventId> OrderedTransaction::processed(std::span<const ConsumedEvent> events) {
  std::vector<EventId> ids;
  ids.reserve(events.size());
  for (const ConsumedEvent& event : events) ids.push_back(event.event_id);
  const std::string array = pg::uuid_array(ids);
  const auto rows = pg::exec_prepared(conn_, sql(kSeen, inbox_.schema()),
                                      {inbox_.consumer_name().c_str(), array.c_str()});
  std::set<EventId> seen;
  for (int row = 0; row < rows.rows(); ++row) {
    if (auto id = EventId::parse(rows.text(row, 0))) seen.insert(*id);
  }
  for (const auto& [key, held] : held_) {
    for (const Held& h : held) seen.insert(h.event.event_id);
  }
  return seen;
}

void OrderedTransaction::apply(const ConsumedEvent& event) {
  attempting_ = &event;
  effect_(conn_, event);
  if (PQtransactionStatus(conn_) != PQTRANS_INTRANS) {
    throw InvalidArgument(
        "inbox: the effect ended or broke the transaction (it must not COMMIT or ROLLBACK, and "
        "must not swallow a failed statement); what was still open is rolled back");
  }
  attempting_ = nullptr;
}

// The aggregate's events for its plan, and in `parking` what is to be parked: the caller's
// requests, and events of a version no upcaster reaches (fresh, or held and let through now); a
// row parked already stays as it is.
std::vector<PlanEvent> OrderedTransaction::plan_events(const std::vector<Held>& held,
                                                       const std::vector<PlanEvent>& fresh,
                                                       std::span<const ConsumedEvent> batch,
                                                       const std::map<EventId, ParkRequest>& park,
                                                       std::map<EventId, ParkRequest>& parking) {
  const auto to_park = [&](const ConsumedEvent& event) {
    if (const auto it = park.find(event.event_id); it != park.end()) {
      parking[event.event_id] = it->second;
      return true;
    }
    if (!unknown_version_) return false;
    std::string why = unknown_version_(event);
    if (why.empty()) return false;
    parking[event.event_id] = {std::move(why), /*unknown_version=*/true};
    return true;
  };
  std::vector<PlanEvent> events = fresh;
  for (PlanEvent& event : events) event.park = to_park(batch[event.index]);
  for (std::size_t i = 0; i < held.size(); ++i) {
    const bool parked = held[i].blocking && held[i].decision == Decision::none;
    events.push_back({held[i].event.aggregate_sequence, true, i, held[i].blocking, held[i].decision,
                      !parked && to_park(held[i].event)});
  }
  return events;
}

void OrderedTransaction::park_event(const Step& step, const ConsumedEvent& event,
                                    const ParkRequest& request, std::vector<InboxResult>& results,
                                    StepTally& tally) {
  const std::string kind = request.unknown_version ? "unknown_version" : "failed";
  tally.parked.push_back(event.event_id);
  if (step.held) {
    parked_held_.push_back({&event, kind, request.reason});
  } else {
    new_rows_.push_back({&event, kind, request.reason});
    results[step.index] = InboxResult::parked;
  }
}

void OrderedTransaction::run(const AggregateKey& key, const std::vector<PlanEvent>& fresh,
                             std::span<const ConsumedEvent> batch,
                             std::vector<InboxResult>& results,
                             const std::map<EventId, ParkRequest>& park, StepTally& tally) {
  std::vector<Held>& held = held_[key];
  std::map<EventId, ParkRequest> parking;
  std::vector<PlanEvent> events = plan_events(held, fresh, batch, park, parking);
  const auto position = positions_[key];
  const AggregatePlan plan =
      plan_aggregate(position, inbox_.ordering().start_at_first_seen, std::move(events));
  for (const Step& step : plan.steps) {
    const ConsumedEvent& event = step.held ? held[step.index].event : batch[step.index];
    const bool decided = step.held && held[step.index].decision != Decision::none;
    switch (step.kind) {
      case StepKind::apply:
        attempting_decided_ = decided;
        apply(event);
        if (!step.held) results[step.index] = InboxResult::applied;
        break;
      case StepKind::hold:
        new_rows_.push_back({&event, "waiting", step.reason});
        results[step.index] = InboxResult::held;
        break;
      case StepKind::park: {
        const auto why = parking.find(event.event_id);
        park_event(step, event, why == parking.end() ? ParkRequest{"parked"} : why->second, results,
                   tally);
        break;
      }
      case StepKind::duplicate:
      case StepKind::forget:
      case StepKind::skip:
        break;
    }
    if (step.kind == StepKind::apply || step.kind == StepKind::skip) {
      processed_.push_back(event.event_id);
    }
    if (step.held && step.kind != StepKind::park) {
      deleted_.push_back(event.event_id);
      if (decided) ++tally.decided;
      if (step.kind == StepKind::apply) ++tally.applied_from_held;
    }
  }
  if (plan.position_moved && plan.position) moved_[key] = *plan.position;
}

void OrderedTransaction::write() {
  const std::string& consumer = inbox_.consumer_name();
  if (!moved_.empty()) {
    pg::ArrayLiteral types, ids, sequences;
    for (const auto& [key, sequence] : moved_) {
      types.add(key.type);
      ids.add(key.id);
      sequences.add_plain(std::to_string(sequence));
    }
    pg::exec_prepared(
        conn_, sql(kMovePositions, inbox_.schema()),
        {consumer.c_str(), types.text().c_str(), ids.text().c_str(), sequences.text().c_str()});
  }
  if (!new_rows_.empty()) {
    std::vector<pg::ArrayLiteral> columns(13);
    for (const NewRow& row : new_rows_) {
      const ConsumedEvent& e = *row.event;
      columns[0].add(e.event_id);
      columns[1].add(e.aggregate_type);
      columns[2].add(e.aggregate_id);
      columns[3].add_plain(std::to_string(e.aggregate_sequence));
      columns[4].add(e.event_type);
      columns[5].add_plain(std::to_string(e.schema_version));
      columns[6].add(to_hex(e.payload));
      columns[7].add(e.traceparent);
      columns[8].add(e.topic);
      columns[9].add_plain(std::to_string(e.partition));
      columns[10].add_plain(std::to_string(e.offset));
      columns[11].add(row.kind);
      columns[12].add(row.reason);
    }
    const std::string park_after = std::to_string(inbox_.ordering().park_after.count());
    std::vector<const char*> params{consumer.c_str()};
    for (pg::ArrayLiteral& column : columns) params.push_back(column.text().c_str());
    params.push_back(park_after.c_str());
    pg::exec_prepared(conn_, sql(kInsertHeld, inbox_.schema()), params);
  }
  for (const NewRow& row : parked_held_) {
    const std::string id = row.event->event_id.to_string();
    pg::exec_prepared(conn_, sql(kParkHeld, inbox_.schema()),
                      {consumer.c_str(), id.c_str(), row.reason.c_str(), row.kind.c_str()});
  }
  const auto by_ids = [&](const char* statement, const std::vector<EventId>& ids) {
    if (ids.empty()) return;
    const std::string array = pg::uuid_array(ids);
    pg::exec_prepared(conn_, sql(statement, inbox_.schema()), {consumer.c_str(), array.c_str()});
  };
  by_ids(kDeleteHeld, deleted_);
  by_ids(kProcessed, processed_);
}

}  // namespace outbox::detail
