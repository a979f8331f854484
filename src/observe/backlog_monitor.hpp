#pragma once
// The backlog gauges and the slowest aggregates, from one query on a thread and connection of its
// own, so a scrape never waits for it. The query reads every pending row (seconds at a million,
// docs/OPERATIONS.md), so the next run waits next_backlog_query(). A query that fails or passes
// its 30 s timeout leaves the gauges out (absent, never stale) and outbox_backlog_query_up 0
// until one works again.

#include <libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "observe/history.hpp"
#include "observe/metric_families.hpp"
#include "outbox/schema.hpp"
#include "outbox/status.hpp"
#include "pg/connection.hpp"

namespace outbox::observe {

// What the last run found, as one copy taken under the monitor's lock.
struct BacklogReading {
  bool ok = false;                 // the last run worked
  std::string error;               // why the last run failed; empty before any failure
  double last_query_seconds = -1;  // before the first run: none
  std::vector<BacklogRow> rows;    // by aggregate type, from the last run that worked
  std::vector<SlowAggregate> slowest;
  std::vector<SlotRow> slots;  // the database's pgoutput slots, by name
  RelaySessionCounts sessions;
  // What the relay sessions (not ended) report of themselves as unwell: "relay r-1:...:
  // broker_unavailable".
  std::vector<std::string> unwell;
  // Every live session reports its published count (none is of a build before migration 17,
  // whose rows say nothing, read as 0): the history's rate can be trusted.
  bool counts_complete = true;
  std::vector<HistorySample> history;  // only from reading_with_history()
};

// Thread safety: every function from any thread. start() once; stop() blocks until the thread
// has ended (a query in progress is cancelled).
class BacklogMonitor {
 public:
  BacklogMonitor(std::string database_url, SchemaName schema, std::chrono::milliseconds refresh)
      : database_url_(std::move(database_url)), schema_(std::move(schema)), refresh_(refresh) {}
  ~BacklogMonitor();  // stops
  BacklogMonitor(const BacklogMonitor&) = delete;
  BacklogMonitor& operator=(const BacklogMonitor&) = delete;

  void start();
  void stop() noexcept;
  // Asks for a run now (or once the last run's stretch is over: earliest_asked_backlog_query) and
  // waits up to `timeout` for one that began after the call.
  bool refresh(std::chrono::milliseconds timeout);
  [[nodiscard]] BacklogReading reading();
  // reading() with the last hour of readings (history.hpp, oldest first), from the same run.
  [[nodiscard]] BacklogReading reading_with_history();

 private:
  struct Backlog {
    std::vector<BacklogRow> rows;
    std::vector<SlowAggregate> slowest;
    std::vector<SlotRow> slots;
    std::vector<RelaySessionStatus> sessions;
  };

  void refresh_until_stopped();
  // Under mutex_: what a run found, or why it failed; and a log line when the pace changes.
  void record_success(Backlog fresh);
  void record_failure(const std::string& error);
  void announce_pace(std::chrono::steady_clock::duration wait,
                     std::chrono::steady_clock::duration took, bool& announced);
  void set_cancel(PGconn* conn);
  bool begin_query();
  void end_query();
  void connect_if_needed();
  pg::Result run_query(std::chrono::steady_clock::time_point began,
                       std::chrono::steady_clock::duration& took);
  Backlog query_backlog(std::chrono::steady_clock::duration& took);
  std::vector<SlotRow> query_slots();
  std::vector<RelaySessionStatus> query_sessions();
  [[nodiscard]] std::string backlog_sql() const;

  const std::string database_url_;
  const SchemaName schema_;
  const std::chrono::milliseconds refresh_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
  std::unique_ptr<pg::Connection> connection_;  // the thread's
  BacklogReading reading_;                      // under mutex_
  History history_;                             // under mutex_
  PGcancel* cancel_ = nullptr;                  // under mutex_
  bool querying_ = false;                       // under mutex_
  // refresh(): runs begun and done, and a run asked for (under mutex_).
  std::condition_variable done_;
  std::uint64_t runs_begun_ = 0;
  std::uint64_t runs_done_ = 0;
  bool refresh_asked_ = false;
  bool started_ = false;
};

}  // namespace outbox::observe
