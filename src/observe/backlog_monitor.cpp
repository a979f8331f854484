// See backlog_monitor.hpp.

#include "observe/backlog_monitor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "cdc/slot_admin.hpp"
#include "common/log.hpp"
#include "ops/backlog_sql.hpp"
#include "outbox/metrics.hpp"
#include "outbox/status.hpp"

namespace outbox::observe {
namespace {

constexpr std::size_t kMaxBacklogTypes = kMaxAggregateTypeLabels;

// The first kMaxBacklogTypes types of `by_type` (sorted, most pending first) keep their own row,
// the rest share one under kOtherAggregateTypes.
std::vector<BacklogRow> share_other_types(std::vector<BacklogRow>& by_type) {
  std::vector<BacklogRow> rows;
  std::size_t other = kMaxBacklogTypes;  // index of the shared row, once there is one
  for (BacklogRow& row : by_type) {
    if (rows.size() < kMaxBacklogTypes && row.aggregate_type != kOtherAggregateTypes) {
      rows.push_back(std::move(row));
      continue;
    }
    if (other == kMaxBacklogTypes) {
      other = rows.size();
      rows.push_back({kOtherAggregateTypes, 0, 0, 0, 0});
    }
    BacklogRow& shared = rows[other];
    shared.pending += row.pending;
    shared.quarantined += row.quarantined;
    shared.in_doubt += row.in_doubt;
    shared.oldest_pending_age = std::max(shared.oldest_pending_age, row.oldest_pending_age);
  }
  return rows;
}

}  // namespace

BacklogMonitor::~BacklogMonitor() {
  stop();
  if (cancel_ != nullptr) PQfreeCancel(cancel_);
}

void BacklogMonitor::start() {
  thread_ = std::thread([this] { refresh_until_stopped(); });
  std::lock_guard lock(mutex_);
  started_ = true;  // what refresh() reads, not the thread object
}

void BacklogMonitor::stop() noexcept {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    // A run in progress (up to its 30 s timeout, longer while the network is cut) would
    // hold the join, and a systemd stop, that long. Only then: a cancel opens a connection
    // of its own, which an idle thread's stop must not wait for.
    if (querying_ && cancel_ != nullptr) {
      char error[256];
      PQcancel(cancel_, error, sizeof(error));
    }
  }
  wake_.notify_all();
  thread_.join();
}

bool BacklogMonitor::refresh(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!started_ || stopping_) return false;
  const std::uint64_t need = runs_begun_ + 1;
  refresh_asked_ = true;
  wake_.notify_all();
  return done_.wait_for(lock, timeout, [&] { return stopping_ || runs_done_ >= need; }) &&
         !stopping_;
}

BacklogReading BacklogMonitor::reading() {
  std::lock_guard lock(mutex_);
  return reading_;
}

void BacklogMonitor::refresh_until_stopped() {
  std::unique_lock lock(mutex_);
  bool announced = false;  // that the query is slow
  while (!stopping_) {
    const std::uint64_t run = ++runs_begun_;
    refresh_asked_ = false;
    lock.unlock();
    Backlog fresh;
    std::string error;
    std::chrono::steady_clock::duration took{};
    try {
      fresh = query_backlog(took);
    } catch (const std::exception& e) {
      error = e.what();
      set_cancel(nullptr);
      connection_.reset();
    }
    lock.lock();
    if (stopping_) break;  // a run stop() cancelled is no failure to report
    reading_.last_query_seconds = std::chrono::duration<double>(took).count();
    if (error.empty()) {
      record_success(std::move(fresh));
    } else {
      record_failure(error);
    }
    const auto wait = next_backlog_query(refresh_, took);
    announce_pace(wait, took, announced);
    runs_done_ = run;
    done_.notify_all();
    // A refresh asked for runs early, but never inside the stretch.
    const auto floor = std::min(wait, earliest_asked_backlog_query(took));
    wake_.wait_for(lock, floor, [this] { return stopping_; });
    wake_.wait_for(lock, wait - floor, [this] { return stopping_ || refresh_asked_; });
  }
  done_.notify_all();  // refresh() callers: stopping
}

void BacklogMonitor::record_success(Backlog fresh) {
  if (!reading_.ok && !reading_.error.empty()) {
    detail::log().info("metrics: the backlog query works again");
  }
  // Types seen before and gone now read 0 (not absent), while there is room.
  std::map<std::string, BacklogRow> rows;
  for (BacklogRow& row : fresh.rows) {
    rows.emplace(row.aggregate_type, std::move(row));
  }
  for (const BacklogRow& before : reading_.rows) {
    if (rows.size() >= kMaxBacklogTypes + 1) break;
    rows.try_emplace(before.aggregate_type, BacklogRow{before.aggregate_type, 0, 0, 0});
  }
  reading_.rows.clear();
  for (auto& [type, row] : rows) reading_.rows.push_back(std::move(row));
  reading_.slowest = std::move(fresh.slowest);
  reading_.slots = std::move(fresh.slots);
  reading_.sessions = {};
  reading_.unwell.clear();
  reading_.counts_complete = true;
  std::vector<SessionCount> counts;
  for (const RelaySessionStatus& session : fresh.sessions) {
    counts.push_back({session.relay_id, session.published});
    const std::string_view state = session.state();
    if (state == "working") reading_.sessions.working += 1;
    if (state == "waiting for work") reading_.sessions.waiting += 1;
    if (state == "silent") reading_.sessions.silent += 1;
    if (session.ended) continue;
    if (session.health.empty()) reading_.counts_complete = false;  // an older build's row
    if (!session.health.empty() && session.health != "running" && session.health != "starting") {
      reading_.unwell.push_back("relay " + session.relay_id + ": " + session.health);
    }
  }
  const BacklogTotals totals = backlog_totals(reading_.rows);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  history_.record(now, totals.pending, totals.quarantined, totals.oldest_pending_age, counts);
  reading_.ok = true;
  reading_.error.clear();
}

void BacklogMonitor::record_failure(const std::string& error) {
  if (reading_.ok || reading_.error.empty()) {
    detail::log().warn(
        "metrics: the backlog query failed (its gauges are left out until "
        "it works): {}",
        error);
  }
  reading_.ok = false;
  reading_.error = error;
  reading_.slowest.clear();
  reading_.slots.clear();
}

void BacklogMonitor::announce_pace(std::chrono::steady_clock::duration wait,
                                   std::chrono::steady_clock::duration took, bool& announced) {
  if (!announced && wait > refresh_ && took >= std::chrono::seconds(1)) {
    announced = true;
    detail::log().info(
        "metrics: the backlog query took {:.1f} s; it runs every {:.0f} s while it is that "
        "slow (ten times its duration)",
        reading_.last_query_seconds, std::chrono::duration<double>(wait).count());
  } else if (announced && wait <= refresh_) {
    announced = false;
    detail::log().info("metrics: the backlog query is quick again; it runs every {} ms",
                       refresh_.count());
  }
}

// What stop() cancels with: the connection's, replaced under the lock stop() takes.
void BacklogMonitor::set_cancel(PGconn* conn) {
  std::lock_guard lock(mutex_);
  if (cancel_ != nullptr) PQfreeCancel(cancel_);
  cancel_ = conn != nullptr ? PQgetCancel(conn) : nullptr;
}

// Brackets the query, so that stop() cancels only a query that runs, and none starts once it
// was asked to stop (false).
bool BacklogMonitor::begin_query() {
  std::lock_guard lock(mutex_);
  if (stopping_) return false;
  querying_ = true;
  return true;
}

void BacklogMonitor::end_query() {
  std::lock_guard lock(mutex_);
  querying_ = false;
}

void BacklogMonitor::connect_if_needed() {
  if (connection_ && connection_->healthy()) return;
  set_cancel(nullptr);
  connection_.reset();
  connection_ = std::make_unique<pg::Connection>(
      pg::Connection::open(database_url_, "outbox-metrics", {{"connect_timeout", "5"}}));
  set_cancel(connection_->get());
  // No JIT: it compiled this query anew on every run (0.17 s of 2.4 s at a million rows).
  pg::exec(connection_->get(), "SET statement_timeout = 30000");
  pg::exec(connection_->get(), "SET jit = off");
}

// The query's rows; `took` is how long it ran from `began`, also when it failed (a timeout was that
// slow).
pg::Result BacklogMonitor::run_query(std::chrono::steady_clock::time_point began,
                                     std::chrono::steady_clock::duration& took) {
  const auto timed = [&] { took = std::chrono::steady_clock::now() - began; };
  try {
    pg::Result r = pg::exec(connection_->get(), backlog_sql());
    timed();
    end_query();
    return r;
  } catch (...) {
    timed();  // a statement timeout counts: it was that slow
    end_query();
    throw;
  }
}

// One run of the backlog query (this thread's connection). The first kMaxBacklogTypes types
// by pending count, the rest together under kOtherAggregateTypes; then the slowest aggregates.
// `took` is how long the query ran, also when it failed (a timeout was that slow). Nothing
// when stopping.
BacklogMonitor::Backlog BacklogMonitor::query_backlog(std::chrono::steady_clock::duration& took) {
  connect_if_needed();
  // Timed without the connection: a server that is down must not stretch the wait.
  const auto began = std::chrono::steady_clock::now();
  if (!begin_query()) return {};
  const pg::Result result = run_query(began, took);
  Backlog backlog;
  std::vector<BacklogRow> by_type;
  for (int i = 0; i < result.rows(); ++i) {
    if (result.text(i, 0) == "slow") {
      backlog.slowest.push_back({std::string(result.text(i, 1)), std::string(result.text(i, 2)),
                                 result.int64(i, 3), std::stod(std::string(result.text(i, 4)))});
    } else {
      by_type.push_back({std::string(result.text(i, 1)), std::stod(std::string(result.text(i, 3))),
                         std::stod(std::string(result.text(i, 4))),
                         std::stod(std::string(result.text(i, 5))),
                         std::stod(std::string(result.text(i, 6)))});
    }
  }
  // Most pending first (the first kMaxBacklogTypes keep their own label), then by name.
  std::sort(by_type.begin(), by_type.end(), [](const auto& a, const auto& b) {
    return a.pending != b.pending ? a.pending > b.pending : a.aggregate_type < b.aggregate_type;
  });
  std::sort(backlog.slowest.begin(), backlog.slowest.end(),
            [](const auto& a, const auto& b) { return a.waiting_age > b.waiting_age; });
  backlog.rows = share_other_types(by_type);
  backlog.slots = query_slots();
  backlog.sessions = query_sessions();
  return backlog;
}

// The database's pgoutput slots (cdc::our_slots, `outbox status`'s reading): a few rows of a
// view, not timed with the backlog query.
std::vector<SlotRow> BacklogMonitor::query_slots() {
  std::vector<SlotRow> slots;
  const std::string database = PQdb(connection_->get());
  for (const cdc::ServerSlot& slot : cdc::our_slots(connection_->get())) {
    slots.push_back({database, slot.name, slot.walsender != 0,
                     static_cast<double>(slot.retained_bytes.value_or(-1))});
  }
  return slots;
}

// The relay sessions as `outbox status` reads them (the same reading): a few rows.
std::vector<RelaySessionStatus> BacklogMonitor::query_sessions() {
  return read_relay_sessions(connection_->get(), schema_, 1000);
}

BacklogReading BacklogMonitor::reading_with_history() {
  std::lock_guard lock(mutex_);
  BacklogReading copy = reading_;
  copy.history = history_.samples();
  return copy;
}

std::string BacklogMonitor::backlog_sql() const { return detail::backlog_sql(schema_); }

}  // namespace outbox::observe
