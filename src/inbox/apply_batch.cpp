#include "inbox/apply_batch.hpp"

#include "common/backoff.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/error.hpp"

namespace outbox::detail {

InboxApplier::Effect InboxApplier::watched(const Effect& effect, bool& effect_threw,
                                           EventId& failed) {
  return [&effect, &effect_threw, &failed](PGconn* c, const ConsumedEvent& event) {
    try {
      effect(c, event);
    } catch (const DatabaseError& error) {
      // A lost connection or a deadlock is the database's trouble, anything else the effect's.
      effect_threw = !error.retryable() && PQstatus(c) == CONNECTION_OK;
      if (effect_threw) failed = event.event_id;
      throw;
    } catch (...) {
      effect_threw = PQstatus(c) == CONNECTION_OK;
      if (effect_threw) failed = event.event_id;
      throw;
    }
  };
}

void InboxApplier::remember_failure(const EventId& id, const std::string& what) {
  if (id.is_nil()) return;
  Failures& failures = failures_[id];
  ++failures.count;
  failures.last = what;
}

InboxApplier::Effect InboxApplier::upcasting(const Effect& effect) const {
  if (upcasters_.empty()) return effect;
  return [this, &effect](PGconn* c, const ConsumedEvent& event) {
    const auto target = upcasters_.current_version(event.event_type);
    if (!target || event.schema_version == *target) return effect(c, event);  // no copy
    ConsumedEvent current = event;
    upcasters_.upcast(current, c);  // throws for a version it cannot reach: never applied
    effect(c, current);
  };
}

namespace {

// Whether PostgreSQL's text takes `text`: well-formed UTF-8 without NUL (the inbox's database is
// UTF-8; a broker message's fields are whatever its writer sent).
bool storable(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == 0) return false;
    std::size_t length = b < 0x80           ? 1
                         : (b >> 5) == 0x6  ? 2
                         : (b >> 4) == 0xe  ? 3
                         : (b >> 3) == 0x1e ? 4
                                            : 0;
    if (length == 0 || i + length > text.size()) return false;
    std::uint32_t code = length == 1 ? b : b & (0x7f >> length);
    for (std::size_t k = 1; k < length; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      code = (code << 6) | (c & 0x3f);
    }
    const bool overlong = (length == 2 && code < 0x80) || (length == 3 && code < 0x800) ||
                          (length == 4 && code < 0x10000);
    if (overlong || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += length;
  }
  return true;
}

// Why a gap-aware inbox cannot take `event` ("" when it can): it orders by the sequence and keeps
// held events' fields in text columns.
std::string unorderable(const ConsumedEvent& event) {
  if (event.aggregate_sequence <= 0) return "no aggregate_sequence (it must be positive)";
  for (const std::string* field : {&event.aggregate_type, &event.aggregate_id, &event.event_type,
                                   &event.traceparent, &event.topic}) {
    if (!storable(*field)) return "a field that is not UTF-8 text (or holds NUL)";
  }
  return {};
}

}  // namespace

std::map<EventId, ParkRequest> InboxApplier::to_park() const {
  std::map<EventId, ParkRequest> park;
  const int limit = inbox_.ordering().park_failing_after;
  for (const auto& [id, failures] : failures_) {
    if (limit > 0 && failures.count >= limit) {
      park[id] = {"its effect failed " + std::to_string(failures.count) +
                  " times in a row; the last error: " + failures.last};
    }
  }
  return park;
}

Inbox::UnknownVersion InboxApplier::unknown_version() const {
  if (upcasters_.empty()) return {};
  return [this](const ConsumedEvent& event) { return upcasters_.unknown(event); };
}

BatchApplied InboxApplier::apply(PGconn* conn, const std::vector<ConsumedEvent>& events,
                                 const Effect& effect, bool& effect_threw) {
  effect_threw = false;
  EventId failed;
  const Effect user = upcasting(effect);
  const Effect each = watched(user, effect_threw, failed);
  BatchApplied counts;
  try {
    if (!inbox_.ordering().enabled) {
      std::vector<EventId> ids;
      ids.reserve(events.size());
      for (const auto& event : events) ids.push_back(event.event_id);
      const auto results =
          inbox_.process_batch(conn, ids, [&](PGconn* c, std::size_t i) { each(c, events[i]); });
      for (const InboxResult result : results) {
        ++(result == InboxResult::applied ? counts.applied : counts.duplicates);
      }
      return counts;
    }
    // A message the gap-aware inbox cannot order is no outbox event: rejected as one without an
    // id is, rather than failing its whole batch for ever.
    // The batch is copied only when it holds such a message (the hot path copies nothing).
    std::vector<ConsumedEvent> taken;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const std::string why = unorderable(events[i]);
      if (why.empty()) {
        if (counts.rejected > 0) taken.push_back(events[i]);
        continue;
      }
      if (counts.rejected++ == 0) taken.assign(events.begin(), events.begin() + i);
      log().error("inbox {}: {}[{}]@{}, event {}: {}; skipped", printable(inbox_.consumer_name()),
                  printable(events[i].topic), events[i].partition, events[i].offset,
                  events[i].event_id.to_string(), why);
    }
    const OrderedBatchResult result = inbox_.process_in_order(
        conn, counts.rejected > 0 ? taken : events, each, to_park(), unknown_version());
    counts.applied = result.applied_from_held;
    counts.decided = result.decided;
    for (const InboxResult r : result.results) {
      if (r == InboxResult::applied) ++counts.applied;
      if (r == InboxResult::duplicate) ++counts.duplicates;
      if (r == InboxResult::held) ++counts.held;
    }
    counts.parked = result.parked.size();  // held rows parked in place count too
    // Consecutive failures: the batch committed, so none of its events failed this time.
    for (const ConsumedEvent& event : events) failures_.erase(event.event_id);
    for (const EventId& id : result.parked) failures_.erase(id);
    if (counts.parked > 0 || counts.held > 0) next_tend_ = {};  // the gauges show it at once
    return counts;
  } catch (const std::exception& error) {
    if (effect_threw) remember_failure(failed, error.what());
    throw;
  }
}

BatchApplied InboxApplier::carry_out(PGconn* conn, const Effect& effect, bool& effect_threw) {
  effect_threw = false;
  EventId failed;
  const Effect user = upcasting(effect);
  OrderedBatchResult result;
  try {
    result = inbox_.carry_out_decisions(conn, watched(user, effect_threw, failed), to_park(),
                                        unknown_version());
  } catch (const std::exception& error) {
    if (effect_threw) remember_failure(failed, error.what());
    throw;
  }
  for (const EventId& id : result.parked) failures_.erase(id);
  BatchApplied counts;
  counts.parked = result.parked.size();
  counts.applied = result.applied_from_held;
  counts.decided = result.decided;
  return counts;
}

void run_until_stopped(HealthBoard& health, std::chrono::milliseconds backoff_base,
                       std::chrono::milliseconds backoff_max, const std::atomic<bool>& stop,
                       const bool& effect_threw, const std::function<void()>& poll_once) {
  Backoff backoff(backoff_base, backoff_max);
  health.set(Health::running);
  while (!stop.load()) {
    try {
      poll_once();
      backoff.reset();
      if (health.health() != Health::running) health.set(Health::running);
      continue;
    } catch (const DatabaseError& error) {
      if (effect_threw) {
        health.set(Health::effect_failing, error.what());
      } else if (error.retryable()) {
        health.set(Health::database_unavailable, error.what());
      } else {
        health.set(Health::stopped, error.what());
        throw;
      }
    } catch (const ConfigError& error) {
      health.set(Health::stopped, error.what());
      throw;
    } catch (const BrokerError& error) {
      health.set(Health::broker_unavailable, error.what());
    } catch (const std::exception& error) {
      health.set(Health::effect_failing, error.what());
    }
    backoff.wait([&stop] { return stop.load(); });
  }
  health.set(Health::stopped);
}

}  // namespace outbox::detail
