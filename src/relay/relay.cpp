#include "outbox/relay.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "common/backoff.hpp"
#include "common/fault.hpp"
#include "common/health_board.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"
#include "relay/claim_schedule.hpp"
#include "relay/dead_sessions.hpp"
#include "relay/relay_sql.hpp"

namespace outbox {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string default_relay_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return fmt::format("{}-{}-{:06x}", host, ::getpid(), random() & 0xFFFFFF);
}

// At most `limit` bytes of `text`, not ending inside a UTF-8 sequence (PostgreSQL refuses those).
std::string_view utf8_prefix(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

// A relay's connection: the session settings (asynchronous commit, generic plans without
// sequential scans; explained in relay_sql.cpp, next to the statements they are for), LISTEN, and
// the session's advisory lock, held until the session ends. Its key is random per session (a
// relay that reconnects while its old session lingers on a half-open connection must not wait for
// itself) and non-negative (relay_sql::sweep reads it back from pg_locks).
struct Session {
  pg::Connection connection;
  std::int64_t lock_key = 0;
};

Session open_session(const RelayOptions& options) {
  auto connection = pg::Connection::open(options.database_url, "outbox-relay");
  for (const std::string& setting : relay_sql::session_settings(options.durable_marks)) {
    pg::exec(connection.get(), setting);
  }
  static thread_local std::mt19937_64 random(std::random_device{}());
  std::int64_t lock_key = 0;
  for (;;) {  // a key some other session holds already (2^-63 per session) is simply redrawn
    lock_key = static_cast<std::int64_t>(random() >> 1);
    const std::string key_text = std::to_string(lock_key);
    if (pg::exec(connection.get(), relay_sql::take_session_lock(), {key_text.c_str()}).text(0, 0) ==
        "t") {
      break;
    }
  }
  connection.listen('"' + options.schema.notify_channel() + '"');
  return Session{std::move(connection), lock_key};
}

// Refuses a schema without migration 9 (the relays' session locks) with what to do, instead of a
// missing column at the first registration.
void check_schema(PGconn* conn, const SchemaName& schema) {
  constexpr int kNeeded = 9;  // the session-lock columns (migration 9)
  std::int64_t version = 0;
  try {
    version = pg::exec(conn, relay_sql::schema_version(schema)).int64(0, 0);
  } catch (const DatabaseError& error) {
    if (error.sqlstate() != "42P01") throw;  // undefined table: never migrated
  }
  if (version < kNeeded) {
    throw ConfigError(fmt::format(
        "relay: schema {} is at version {}; this relay needs version {} or later (run `outbox "
        "migrate` before deploying relays of this build)",
        schema.name(), version, kNeeded));
  }
}

// An awake relay looks for new rows by itself every kAwakePoll (producers do not notify it), or
// every kStalledPoll while sends are in flight and no broker report came for kStallAfter (a
// stalled broker: looking hundreds of times a second would only re-walk its own leased heads).
// At 10 ms, rows committed while the relay waited for acks waited up to 10 ms: live 500/s p50
// ~8 ms, 1,000/s p99 ~12 ms; at 3 ms, 4.4 and 6 ms (docs/PERFORMANCE.md).
constexpr milliseconds kAwakePoll{3};
// (Claims that broker reports ask for are paced under heavy traffic: detail::ClaimSchedule.)
constexpr milliseconds kStalledPoll{80};
constexpr milliseconds kStallAfter{100};

// An awake relay that runs out of work stays awake this long before it asks producers to notify
// it. Under steady traffic it otherwise fell asleep between events, and a producer that had seen
// it still awake (so sent no NOTIFY) waited for its idle timer: at 200 events/s the median
// latency was either 1.4 or 7-8 ms from run to run; staying awake, ~3 ms every run.
constexpr milliseconds kStayAwake{200};

// A relay that has just started to listen sleeps this long first, then twice as long each time
// up to idle_poll_max, so a row whose producer saw the relay still awake is found soon.
constexpr milliseconds kFirstIdleWait{2};

// A relay refreshes its outbox_relays row this often, awake or listening; producers ignore rows
// older than 30 s (migrations 3 and 6), so a relay that died awake stops suppressing NOTIFY soon,
// and one that died listening stops asking for it. (A live relay's sweep takes a dead session's
// row out of their count sooner.)
constexpr std::chrono::seconds kHeartbeat{10};

// Every relay looks this often for relay sessions that ended (relay_sql::sweep): one statement
// on the small outbox_relays table and pg_locks, never on the claim's path. A session seen ended
// counts as dead after kSessionGrace, or kRestartGrace if it began before the server's last start
// (every relay then reconnects at once, the last after up to reconnect_backoff_max, 5 s by
// default). Then its claims are taken over at once instead of after their lease: after a SIGKILL
// another relay publishes them within kSweepEvery + kSessionGrace + a claim.
constexpr milliseconds kSweepEvery{500};
constexpr milliseconds kSessionGrace{1000};
constexpr milliseconds kRestartGrace{10000};

RelayOptions with_relay_id(RelayOptions options) {
  if (options.relay_id.empty()) options.relay_id = default_relay_id();
  return options;
}

// A finished send whose outcome still has to be written to PostgreSQL.
struct Outcome {
  EventId event_id;
  std::string token;
  std::string error;  // empty: published
  bool permanent = false;
};

}  // namespace

class Relay::Impl {
 public:
  Impl(RelayOptions options, std::unique_ptr<Sink> sink)
      : options_(with_relay_id(std::move(options))),
        sink_(std::move(sink)),
        session_(open_session(options_)),
        claim_sql_(relay_sql::claim(options_.schema)),
        mark_published_sql_(relay_sql::mark_published(options_.schema)),
        mark_failed_sql_(relay_sql::mark_failed(options_.schema)),
        renew_sql_(relay_sql::renew(options_.schema)),
        set_listening_sql_(relay_sql::set_listening(options_.schema)),
        forget_relay_sql_(relay_sql::forget_relay(options_.schema)),
        sweep_sql_(relay_sql::sweep(options_.schema)),
        health_("relay " + options_.relay_id) {
    if (!sink_) throw InvalidArgument("relay: the sink is null");
    if (options_.batch_size == 0 || options_.max_in_flight == 0) {
      throw InvalidArgument("relay: batch_size and max_in_flight must be at least 1");
    }
    if (options_.max_in_flight_bytes == 0) {
      throw InvalidArgument(
          "relay: max_in_flight_bytes must be at least 1 (a row larger than it still goes alone)");
    }
    if (options_.max_attempts < 0)
      throw InvalidArgument("relay: max_attempts must be 0 (no limit) or more");
    if (options_.idle_poll_max < kFirstIdleWait) {
      throw InvalidArgument(fmt::format(
          "relay: idle_poll_max is {} ms; it must be at least {} ms (an idle relay sleeps that "
          "long at most between looks)",
          options_.idle_poll_max.count(), kFirstIdleWait.count()));
    }
    if (options_.lease < milliseconds(100)) {
      throw InvalidArgument(
          "relay: lease must be at least 100 ms (it bounds how long a crashed "
          "relay's rows wait before another relay takes them)");
    }
    if (options_.reconnect_backoff_base.count() <= 0 ||
        options_.reconnect_backoff_max < options_.reconnect_backoff_base) {
      throw InvalidArgument(
          "relay: reconnect_backoff_base must be positive and reconnect_backoff_max at least as "
          "large");
    }
    check_schema(session_.connection.get(), options_.schema);
    begin_session();
  }

  bool loop(bool until_idle, Clock::time_point deadline) {
    draining_ = false;
    bool claim_wanted = true;
    detail::ClaimSchedule schedule(Clock::now());
    milliseconds idle_wait = kFirstIdleWait;
    // Since when the broker owes us nothing: the last report, or the send that ended a time
    // with nothing in flight.
    auto last_report = Clock::now();
    auto last_renewal = Clock::now();
    auto last_work = Clock::now();  // the last claim that found rows, or the last report
    auto until_look = [&](milliseconds interval) { return schedule.until(Clock::now(), interval); };
    std::vector<DeliveryReport> reports;
    health_.set(Health::running);
    bool registered = false;
    while (!stop_.load(std::memory_order_relaxed)) {
      if (until_idle && Clock::now() >= deadline) break;
      try {
        if (!registered) {
          set_listening(false);  // awake: producers need not notify while we look by ourselves
          registered = true;
        }
        // Notifications that arrived meanwhile ask for a claim; reading them never blocks here.
        if (session_.connection.wait_for_notifications(milliseconds(0)) > 0) {
          claim_wanted = true;
          schedule.announced();
        }
        // Producers do not notify an awake relay (migration 3), so look for new rows by ourselves
        // while sends are in flight.
        const bool stalled = !in_flight_.empty() && Clock::now() - last_report > kStallAfter;
        if (schedule.due(Clock::now(), stalled ? kStalledPoll : kAwakePoll)) claim_wanted = true;
        if (Clock::now() - last_heartbeat_ > kHeartbeat) set_listening(listening_);
        // Relay sessions that ended: their claims need not wait for their leases to run out.
        if (Clock::now() >= dead_sessions_.next_sweep() && sweep()) {
          claim_wanted = true;
          schedule.announced();  // like a NOTIFY: never paced
        }

        // Renew first: after a stall (a long GC-like pause, SIGSTOP) our leases may have run out,
        // and a claim must not re-take rows this relay still has in flight under an older token.
        if (Clock::now() - last_renewal > options_.lease / 3) {
          renew_leases();
          last_renewal = Clock::now();
        }

        std::size_t claimed = 0;
        const std::size_t room = options_.max_in_flight - in_flight_.size();
        const bool paced = claim_wanted && schedule.paced(Clock::now());
        if (claim_wanted && room > 0 && bytes_allow_a_claim() && !paced) {
          const std::size_t limit = std::min(room, options_.batch_size);
          const bool from_start = cursor_type_.empty() && cursor_id_.empty();
          const auto now = Clock::now();
          schedule.started(now);
          if (in_flight_.empty()) last_report = now;
          ClaimResult result = claim(limit);
          if (result.reached_end && !from_start && result.claimed < limit &&
              bytes_allow_a_claim()) {
            // Wrap around: the aggregates before the cursor get their turn in this same pass.
            const ClaimResult wrapped = claim(limit - result.claimed);
            result.claimed += wrapped.claimed;
            result.reached_end = wrapped.reached_end;
          }
          claimed = result.claimed;
          // More aggregates after the cursor, or a full batch: ask again at once. Otherwise wait
          // for a reason (NOTIFY, a report, the idle timer).
          claim_wanted = !result.reached_end || claimed == std::min(room, options_.batch_size);
          schedule.finished(claimed, claim_wanted);
        }

        reports.clear();
        // With the window full (rows or bytes) a wanted claim must wait for reports like anything
        // else, or the loop would poll without waiting until the broker answers.
        const bool can_claim = in_flight_.size() < options_.max_in_flight && bytes_allow_a_claim();
        const bool busy = claimed > 0 || (claim_wanted && can_claim && !paced);
        // Wait for reports until our own next look is due, at most 5 ms.
        const milliseconds wait = !can_claim ? milliseconds(5)
                                  : busy     ? milliseconds(0)
                                         : std::clamp(until_look(paced ? detail::ClaimSchedule::kGap
                                                                 : stalled ? kStalledPoll
                                                                           : kAwakePoll),
                                                      milliseconds(0), milliseconds(5));
        if (!in_flight_.empty()) {
          sink_->poll(wait, reports);
        } else if (paced && session_.connection.wait_for_notifications(wait) > 0) {
          schedule.announced();
        }
        if (!reports.empty()) {
          last_report = Clock::now();
          record(reports);
          // A published event may unblock the next sequence of its aggregate, and a failed one
          // frees room in the window.
          claim_wanted = true;
        }
        if (in_flight_.empty() && !claim_wanted) {
          if (until_idle) {
            forget();
            return true;
          }
          if (!listening_ && Clock::now() - last_work < kStayAwake) {
            // Work came moments ago: more is likely, and an awake relay finds it within
            // kAwakePoll without making producers notify. Wait for our next look.
            // At least 1 ms: a claim that itself took kAwakePoll must not make the next one
            // follow at once for the whole kStayAwake.
            if (session_.connection.wait_for_notifications(
                    std::clamp(until_look(kAwakePoll), milliseconds(1), kAwakePoll)) > 0) {
              schedule.announced();  // a NOTIFY is never paced
            }
            claim_wanted = true;
            continue;
          }
          if (!listening_) {
            // From now on producers notify us. A row committed after our last claim but before
            // this statement announced nothing: look once more before sleeping.
            set_listening(true);
            idle_wait = kFirstIdleWait;
            claim_wanted = true;
            continue;
          }
          // Nothing to do: sleep until NOTIFY or until the adaptive poll interval passes (rows
          // whose backoff or foreign lease ends announce nothing).
          // Never past a heartbeat (a listening relay whose row goes stale is not notified) nor
          // past the next sweep (a dead relay's claims wait for it).
          const auto duty_due = std::chrono::duration_cast<milliseconds>(
              std::min(last_heartbeat_ + kHeartbeat, dead_sessions_.next_sweep()) - Clock::now() +
              milliseconds(1));
          if (session_.connection.wait_for_notifications(
                  std::clamp(duty_due, milliseconds(0), idle_wait)) > 0) {
            idle_wait = kFirstIdleWait;
            schedule.announced();
          } else {
            idle_wait = std::min(idle_wait * 2, options_.idle_poll_max);
          }
          claim_wanted = true;
        } else if (claimed > 0 || !reports.empty()) {
          last_work = Clock::now();
          idle_wait = kFirstIdleWait;
          if (listening_) set_listening(false);  // busy again: no NOTIFY needed
        }
      } catch (const DatabaseError& error) {
        if (!error.retryable()) {
          health_.set(Health::stopped, error.what());
          throw;
        }
        reconnect(error);
        claim_wanted = true;
        schedule.announced();
        last_renewal = Clock::now();
        last_report = Clock::now();  // reports taken during the outage are written by now
        registered = false;          // say again that we are awake, on the new connection
      }
    }
    drain();
    forget();
    health_.set(Health::stopped);
    return false;
  }

  void request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }

  RelayStats stats() const {
    RelayStats s;
    s.claimed = claimed_.load(std::memory_order_relaxed);
    s.published = published_.load(std::memory_order_relaxed);
    s.failed = failed_.load(std::memory_order_relaxed);
    s.fenced = fenced_.load(std::memory_order_relaxed);
    s.quarantined = quarantined_.load(std::memory_order_relaxed);
    s.claim_queries = claim_queries_.load(std::memory_order_relaxed);
    s.mark_queries = mark_queries_.load(std::memory_order_relaxed);
    s.successors = successors_.load(std::memory_order_relaxed);
    s.in_flight = in_flight_count_.load(std::memory_order_relaxed);
    s.in_flight_bytes = in_flight_bytes_count_.load(std::memory_order_relaxed);
    s.reconnects = reconnects_.load(std::memory_order_relaxed);
    std::tie(s.health, s.last_error) = health_.snapshot();
    s.last_error_age = health_.last_error_age();
    return s;
  }

  const std::string& relay_id() const noexcept { return options_.relay_id; }

 private:
  struct InFlight {
    Event event;
    std::string token;
    std::uint64_t bytes = 0;  // payload and headers: what it counts against max_in_flight_bytes
  };

  struct ClaimResult {
    std::size_t claimed = 0;
    bool reached_end = true;  // no pending aggregate after the ones visited
  };

  // The payload and header bytes a claim may still take.
  [[nodiscard]] std::uint64_t byte_room() const {
    return in_flight_bytes_ >= options_.max_in_flight_bytes
               ? 0
               : options_.max_in_flight_bytes - in_flight_bytes_;
  }

  // A claim is worth running when the bytes it may take hold the row the last claim stopped at
  // (any row, when it did not stop), or when the relay holds nothing: a row larger than the whole
  // budget then goes alone. Otherwise the claim waits for reports, like a full window.
  [[nodiscard]] bool bytes_allow_a_claim() const {
    if (in_flight_.empty()) return true;
    const std::uint64_t room = byte_room();
    return room > 0 && room >= bytes_wanted_;
  }

  ClaimResult claim(std::size_t limit) {
    const std::string token = next_token();
    const std::string limit_text = std::to_string(limit);
    const std::string lease_text = std::to_string(options_.lease.count());
    const std::string bytes_text = std::to_string(byte_room());
    const auto result = pg::exec_prepared(
        session_.connection.get(), claim_sql_,
        {token.c_str(), limit_text.c_str(), lease_text.c_str(), cursor_type_.c_str(),
         cursor_id_.c_str(), dead_sessions_.prefixes().c_str(), bytes_text.c_str(),
         in_flight_.empty() ? "true" : "false"});
    claim_queries_.fetch_add(1, std::memory_order_relaxed);
    ClaimResult outcome;
    const int rows = result.rows();
    if (rows > 1 || (rows == 1 && !result.is_null(0, 0))) OUTBOX_FAULT(fault::kRelayAfterClaim);
    for (int row = 0; row < rows; ++row) {
      if (result.is_null(row, 0)) {
        // The cursor row: continue after the last aggregate visited, or start over at the end.
        // A claim that stopped at a row the byte budget could not hold continues at that row
        // once the budget can.
        const bool stopped = !result.is_null(row, 4);
        bytes_wanted_ = stopped ? static_cast<std::uint64_t>(result.int64(row, 4)) : 0;
        outcome.reached_end = !stopped && static_cast<std::size_t>(result.int64(row, 3)) < limit;
        cursor_type_ = outcome.reached_end ? std::string() : std::string(result.text(row, 1));
        cursor_id_ = outcome.reached_end ? std::string() : std::string(result.text(row, 2));
        continue;
      }
      send_claimed(result, row, token);
      ++outcome.claimed;
    }
    if (rows == 0) {  // no pending aggregate after the cursor at all
      cursor_type_.clear();
      cursor_id_.clear();
      bytes_wanted_ = 0;
    }
    claimed_.fetch_add(outcome.claimed, std::memory_order_relaxed);
    count_in_flight();
    return outcome;
  }

  // Takes one claimed row (the claim's ten columns) into the window and sends it.
  void send_claimed(const pg::Result& result, int row, const std::string& token) {
    InFlight item;
    item.token = token;
    Event& e = item.event;
    e.event_id = EventId::parse(result.text(row, 0)).value_or(EventId{});
    e.aggregate_type = result.text(row, 1);
    e.aggregate_id = result.text(row, 2);
    e.aggregate_sequence = result.int64(row, 3);
    e.event_type = result.text(row, 4);
    e.schema_version = static_cast<std::int32_t>(result.int64(row, 5));
    e.payload = result.text(row, 6);
    e.headers = result.text(row, 7);
    e.occurred_at = result.text(row, 8);
    e.attempt_count = static_cast<std::int32_t>(result.int64(row, 9));
    item.bytes = e.payload.size() + e.headers.size();
    in_flight_bytes_ += item.bytes;
    const std::uint64_t ticket = next_ticket_++;
    auto [it, inserted] = in_flight_.emplace(ticket, std::move(item));
    OUTBOX_FAULT(fault::kRelayBeforePublish);
    sink_->send(it->second.event, ticket);
  }

  void count_in_flight() {
    in_flight_count_.store(in_flight_.size(), std::memory_order_relaxed);
    in_flight_bytes_count_.store(in_flight_bytes_, std::memory_order_relaxed);
  }

  // A fresh token per claim: a mark must match the exact claim that sent the row, so even this
  // relay cannot complete a row it re-claimed after its own lease ran out. The session part
  // (random per connection) keeps tokens unique also when a relay id is reused (a restarted
  // process, a reconnect), and names the session whose claims are taken over once it is dead.
  std::string next_token() { return fmt::format("{}:{}", session_id_, ++claim_epoch_); }

  // A new connection is a new session: its own lock, row id and token prefix. The row of the
  // previous session goes with the first registration of this one.
  void begin_session() {
    if (!session_id_.empty()) previous_session_id_ = session_id_;
    session_id_ = fmt::format("{}:{:016x}", options_.relay_id, session_.lock_key);
  }

  // Writes the outcomes of `reports` to PostgreSQL. Should that fail, they stay in unrecorded_
  // and the next flush() writes them.
  void record(const std::vector<DeliveryReport>& reports) {
    take(reports);
    flush();
  }

  // Moves finished sends from in_flight_ to the outcomes still to be written.
  void take(const std::vector<DeliveryReport>& reports) {
    bool any_published = false;
    const DeliveryReport* broker_trouble = nullptr;
    for (const DeliveryReport& report : reports) {
      auto it = in_flight_.find(report.ticket);
      if (it == in_flight_.end()) {
        detail::log().error("relay {}: report for unknown ticket {} ignored", relay_id(),
                            report.ticket);
        continue;
      }
      Outcome outcome{it->second.event.event_id, std::move(it->second.token), {}, false};
      if (report.outcome == DeliveryOutcome::published) {
        detail::log().debug("relay {}: event {} ({} {} #{}) acknowledged at [{}]@{}", relay_id(),
                            outcome.event_id.to_string(),
                            detail::printable(it->second.event.aggregate_type),
                            detail::printable(it->second.event.aggregate_id),
                            it->second.event.aggregate_sequence, report.partition, report.offset);
        unrecorded_published_.push_back(std::move(outcome));
        any_published = true;
      } else {
        // Unknown outcomes count as failures: the row is retried with the same event id.
        outcome.error = fmt::format("{}: {}", to_string(report.outcome), report.error);
        outcome.permanent = report.outcome == DeliveryOutcome::permanent_failure;
        // The ids come from the table, which any writer can fill: escaped (common/printable.hpp).
        detail::log().warn("relay {}: event {} ({} {} #{}) not published: {}", relay_id(),
                           outcome.event_id.to_string(),
                           detail::printable(it->second.event.aggregate_type),
                           detail::printable(it->second.event.aggregate_id),
                           it->second.event.aggregate_sequence, detail::printable(outcome.error));
        if (!outcome.permanent) broker_trouble = &report;
        unrecorded_failed_.push_back(std::move(outcome));
      }
      in_flight_bytes_ -= it->second.bytes;
      in_flight_.erase(it);
    }
    count_in_flight();
    // Health follows the latest reports: any ack means the broker works; only transient failures
    // mean it does not (a permanent failure is the event's fault, not the broker's).
    if (any_published && health_.health() == Health::broker_unavailable) {
      health_.set(Health::running);
    } else if (!any_published && broker_trouble != nullptr && health_.health() == Health::running) {
      health_.set(Health::broker_unavailable,
                  fmt::format("{}: {}", sink_->describe(), broker_trouble->error));
    }
  }

  // Writes the outcomes taken so far; each batch leaves unrecorded_ only once its statement
  // succeeded. Marking is idempotent for our own token, so a batch whose statement's fate was
  // unknown (connection lost mid-statement) is simply written again.
  void flush() {
    if (!unrecorded_published_.empty()) {
      OUTBOX_FAULT(fault::kRelayAfterAckBeforeMark);
      const std::string token = next_token();
      const std::string lease_text = std::to_string(options_.lease.count());
      // A stopping relay takes nothing new. Successors get the byte room beyond what the row the
      // last claim stopped at needs (it comes first: successors must not keep taking the room it
      // waits for), and only in the first try: what a second try (for rows the first passed
      // over) would take is not counted yet, so those successors are left to the regular claim.
      bool first_try = !draining_;
      const std::uint64_t room = byte_room();
      const std::string successor_room =
          std::to_string(room > bytes_wanted_ ? room - bytes_wanted_ : 0);
      const auto results = complete(mark_published_sql_, unrecorded_published_, [&](const auto&) {
        const char* claim_successors = first_try ? "true" : "false";
        first_try = false;
        return std::vector<std::string>{token, lease_text, claim_successors, successor_room};
      });
      unrecorded_published_.clear();
      mark_queries_.fetch_add(results.size(), std::memory_order_relaxed);
      OUTBOX_FAULT(fault::kRelayAfterMark);
      std::size_t marked = 0;
      std::size_t successors = 0;
      for (const pg::Result& result : results) {
        for (int row = 0; row < result.rows(); ++row) {
          if (result.text(row, 10) == "marked") {
            ++marked;
          } else {
            send_claimed(result, row, token);
            ++successors;
          }
        }
      }
      published_.fetch_add(marked, std::memory_order_relaxed);
      claimed_.fetch_add(successors, std::memory_order_relaxed);
      successors_.fetch_add(successors, std::memory_order_relaxed);
      count_in_flight();
    }
    if (!unrecorded_failed_.empty()) {
      const auto results = complete(
          mark_failed_sql_, unrecorded_failed_, [&](const std::vector<const Outcome*>& of) {
            pg::ArrayLiteral errors, permanent;
            for (const Outcome* outcome : of) {
              errors.add(utf8_prefix(outcome->error, 2000));
              permanent.add_plain(outcome->permanent ? "t" : "f");
            }
            return std::vector<std::string>{
                errors.text(), std::to_string(options_.backoff_base.count()),
                std::to_string(options_.backoff_max.count()), std::to_string(options_.max_attempts),
                permanent.text()};
          });
      failed_.fetch_add(unrecorded_failed_.size(), std::memory_order_relaxed);
      unrecorded_failed_.clear();
      for (const pg::Result& result : results) {
        for (int row = 0; row < result.rows(); ++row) {
          if (result.text(row, 1) != "t") continue;
          quarantined_.fetch_add(1, std::memory_order_relaxed);
          detail::log().error(
              "relay {}: event {} quarantined; its aggregate waits for an operator "
              "(outbox quarantine list | retry | skip)",
              relay_id(), result.text(row, 0));
        }
      }
    }
  }

  // After a retryable DatabaseError: keeps taking broker reports (their outcomes wait in
  // unrecorded_), reconnects when the connection is gone, writes what waited, renews the leases
  // of what is still in flight. Returns when all that worked or a stop was requested.
  void reconnect(const DatabaseError& first) {
    health_.set(Health::database_unavailable, first.what());
    detail::Backoff backoff(options_.reconnect_backoff_base, options_.reconnect_backoff_max);
    std::vector<DeliveryReport> reports;
    const auto stopping = [this] { return stop_.load(std::memory_order_relaxed); };
    // While waiting, broker reports keep coming: their outcomes wait in unrecorded_.
    const auto take_reports = [&](milliseconds slice) {
      if (in_flight_.empty()) {
        std::this_thread::sleep_for(slice);
        return;
      }
      reports.clear();
      sink_->poll(slice, reports);
      take(reports);
    };
    while (!stopping()) {
      if (!backoff.wait(stopping, take_reports, milliseconds(50))) break;
      try {
        if (!session_.connection.healthy()) {
          session_ = open_session(options_);
          begin_session();
        }
        flush();
        renew_leases();
        reconnects_.fetch_add(1, std::memory_order_relaxed);
        health_.set(Health::running);
        return;
      } catch (const DatabaseError& error) {
        if (!error.retryable()) {
          health_.set(Health::stopped, error.what());
          throw;
        }
        health_.set(Health::database_unavailable, error.what());
      }
    }
  }

  // The parameters after $1 (ids) and $2 (tokens) of a completion, for the outcomes given.
  using ExtraParams = std::function<std::vector<std::string>(const std::vector<const Outcome*>&)>;

  // Runs one batched completion ($1 ids, $2 tokens, then `extra`) and returns its results; counts
  // and logs rows whose claim was no longer ours. Marked rows are those whose last column is not
  // 'claimed'; their first column is the event id.
  //
  // The statements update by ctid (relay_sql.cpp). A row that another transaction changed after
  // the statement's snapshot (the same completion or a renewal still running on a connection we
  // lost; an operator's skip) may be passed over (PostgreSQL versions differ in how they recheck a
  // TID scan), so the rows that did not match get one more try in a new statement, which finds
  // their newest version: only rows that are truly no longer ours count as fenced.
  std::vector<pg::Result> complete(const std::string& sql, const std::vector<Outcome>& outcomes,
                                   const ExtraParams& extra) {
    std::vector<const Outcome*> pending;
    for (const Outcome& outcome : outcomes) pending.push_back(&outcome);
    std::vector<pg::Result> results;
    for (int attempt = 0; attempt < 2 && !pending.empty(); ++attempt) {
      pg::ArrayLiteral ids, tokens;
      for (const Outcome* outcome : pending) {
        ids.add(outcome->event_id);
        tokens.add(outcome->token);
      }
      const std::vector<std::string> extra_values = extra(pending);
      std::vector<const char*> params{ids.text().c_str(), tokens.text().c_str()};
      for (const std::string& value : extra_values) params.push_back(value.c_str());
      pg::Result& result =
          results.emplace_back(pg::exec_prepared(session_.connection.get(), sql, params));
      const int last_column = PQnfields(result.get()) - 1;
      auto is_marked = [&](int row) { return result.text(row, last_column) != "claimed"; };
      std::size_t marked = 0;
      for (int row = 0; row < result.rows(); ++row) marked += is_marked(row) ? 1 : 0;
      if (marked == pending.size()) {  // the usual case: every row matched
        pending.clear();
        break;
      }
      std::unordered_set<std::string> matched;
      for (int row = 0; row < result.rows(); ++row) {
        if (is_marked(row)) matched.emplace(result.text(row, 0));
      }
      std::erase_if(pending, [&](const Outcome* outcome) {
        return matched.contains(outcome->event_id.to_string());
      });
    }
    if (!pending.empty()) {
      fenced_.fetch_add(pending.size(), std::memory_order_relaxed);
      detail::log().warn(
          "relay {}: {} completion(s) fenced: the rows were re-claimed by another relay after our "
          "lease expired, or skipped (a newer claim publishes them; a duplicate publish is "
          "possible)",
          relay_id(), pending.size());
    }
    return results;
  }

  // Records in outbox_relays whether producers must wake us (true) or we look by ourselves; the
  // first call of a session registers it (and drops the row of the session before it, whose
  // claims we still hold and renew: no other relay is to take them over).
  void set_listening(bool listening) {
    if (!previous_session_id_.empty()) {
      pg::exec_prepared(session_.connection.get(), forget_relay_sql_,
                        {previous_session_id_.c_str()});
      previous_session_id_.clear();
    }
    const std::string key_text = std::to_string(session_.lock_key);
    const std::string lease_text = std::to_string(options_.lease.count());
    pg::exec_prepared(
        session_.connection.get(), set_listening_sql_,
        {session_id_.c_str(), listening ? "true" : "false", key_text.c_str(), lease_text.c_str()});
    listening_ = listening;
    last_heartbeat_ = Clock::now();
  }

  // A relay that stops no longer counts as awake, so producers notify the others again.
  void forget() noexcept {
    try {
      pg::exec_prepared(session_.connection.get(), forget_relay_sql_, {session_id_.c_str()});
    } catch (const std::exception& error) {
      detail::log().info(
          "relay {}: could not remove its outbox_relays row ({}); the other relays find its "
          "session ended within a second",
          relay_id(), error.what());
    }
  }

  // Looks for relay sessions that ended (relay_sql::sweep). Claims held by sessions dead past
  // their grace become claimable by the next claim; returns true when that set grew.
  bool sweep() {
    const std::string grace = std::to_string(kSessionGrace.count());
    const std::string restart_grace = std::to_string(kRestartGrace.count());
    const auto result = pg::exec_prepared(session_.connection.get(), sweep_sql_,
                                          {grace.c_str(), restart_grace.c_str()});
    std::vector<detail::DeadSessions::Ended> ended;
    for (int row = 0; row < result.rows(); ++row) {
      ended.push_back(
          {std::string(result.text(row, 0)), std::stod(std::string(result.text(row, 1)))});
      if (ended.back().until_dead_ms > 0) {
        detail::log().debug("relay {}: relay session {} ended; dead in {:.0f} ms unless it is back",
                            relay_id(), ended.back().id, ended.back().until_dead_ms);
      }
    }
    const std::vector<std::string> newly_dead = dead_sessions_.update(ended, Clock::now());
    for (const std::string& id : newly_dead) {
      detail::log().warn(
          "relay {}: relay session {} ended without stopping (killed, or cut off past the grace); "
          "its claims are taken over now, not when their leases run out",
          relay_id(), id);
    }
    return !newly_dead.empty();
  }

  void renew_leases() {
    if (in_flight_.empty()) return;
    pg::ArrayLiteral ids, tokens;
    for (const auto& [ticket, item] : in_flight_) {
      ids.add(item.event.event_id);
      tokens.add(item.token);
    }
    const std::string lease_text = std::to_string(options_.lease.count());
    const auto result =
        pg::exec_prepared(session_.connection.get(), renew_sql_,
                          {ids.text().c_str(), tokens.text().c_str(), lease_text.c_str()});
    if (static_cast<std::size_t>(result.rows()) < in_flight_.size()) {
      detail::log().warn("relay {}: {} in-flight row(s) lost their lease to another relay",
                         relay_id(), in_flight_.size() - static_cast<std::size_t>(result.rows()));
    }
  }

  void drain() {
    draining_ = true;
    const auto deadline = Clock::now() + options_.drain_timeout;
    std::vector<DeliveryReport> reports;
    while (!in_flight_.empty() && Clock::now() < deadline) {
      reports.clear();
      sink_->poll(milliseconds(50), reports);
      take(reports);
    }
    try {
      flush();
    } catch (const DatabaseError& error) {
      detail::log().warn(
          "relay {}: stopped with {} outcome(s) unwritten ({}); their rows are retaken after the "
          "lease",
          relay_id(), unrecorded_published_.size() + unrecorded_failed_.size(), error.what());
    }
    if (!in_flight_.empty()) {
      detail::log().warn(
          "relay {}: stopped with {} send(s) unreported; their rows are retaken after the lease",
          relay_id(), in_flight_.size());
    }
  }

  RelayOptions options_;
  std::unique_ptr<Sink> sink_;
  Session session_;
  std::string session_id_;           // "<relay id>:<session>": its outbox_relays row, token prefix
  std::string previous_session_id_;  // a row to drop at the next registration (after a reconnect)
  const std::string claim_sql_;
  const std::string mark_published_sql_;
  const std::string mark_failed_sql_;
  const std::string renew_sql_;
  const std::string set_listening_sql_;
  const std::string forget_relay_sql_;
  const std::string sweep_sql_;
  detail::DeadSessions dead_sessions_{kSweepEvery};  // their claims are claimable at once
  bool draining_ = false;                            // stopping: record outcomes, take nothing new
  bool listening_ = false;  // what outbox_relays says about us: waiting for a NOTIFY
  Clock::time_point last_heartbeat_;

  std::unordered_map<std::uint64_t, InFlight> in_flight_;
  std::uint64_t in_flight_bytes_ = 0;  // their payload and header bytes
  std::uint64_t bytes_wanted_ = 0;     // the row the last claim stopped at needs this much room
  std::vector<Outcome> unrecorded_published_;  // reported by the broker, not yet written
  std::vector<Outcome> unrecorded_failed_;
  std::uint64_t next_ticket_ = 1;
  std::uint64_t claim_epoch_ = 0;
  std::string cursor_type_;  // where the next claim's scan of pending aggregates starts
  std::string cursor_id_;

  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> claimed_{0};
  std::atomic<std::uint64_t> published_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::atomic<std::uint64_t> fenced_{0};
  std::atomic<std::uint64_t> quarantined_{0};
  std::atomic<std::uint64_t> claim_queries_{0};
  std::atomic<std::uint64_t> mark_queries_{0};
  std::atomic<std::uint64_t> successors_{0};
  std::atomic<std::uint64_t> in_flight_count_{0};
  std::atomic<std::uint64_t> in_flight_bytes_count_{0};
  std::atomic<std::uint64_t> reconnects_{0};
  detail::HealthBoard health_;
};

Relay::Relay(RelayOptions options, std::unique_ptr<Sink> sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}
Relay::~Relay() = default;

void Relay::run() {
  detail::log().info("relay {} started", impl_->relay_id());
  impl_->loop(false, Clock::time_point::max());
  detail::log().info("relay {} stopped", impl_->relay_id());
}

bool Relay::run_until_idle(milliseconds limit) { return impl_->loop(true, Clock::now() + limit); }

void Relay::request_stop() noexcept { impl_->request_stop(); }
RelayStats Relay::stats() const { return impl_->stats(); }
const std::string& Relay::relay_id() const noexcept { return impl_->relay_id(); }

}  // namespace outbox
