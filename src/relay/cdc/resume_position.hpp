#pragma once
// Where a change-data-capture stream starts, when that is past the slot's own position (after a
// crash PostgreSQL restarts a slot at its position of the last checkpoint, and would bring again
// every transaction since): Debezium keeps the same idea in its WalPositionLocator.
//
// - A relay of row events starts from the furthest position it confirmed itself on this server
//   and timeline (what it would skip on rows is pending in the table, and the table path
//   publishes it); on another server or timeline, from the slot's.
// - A table-less relay starts from the position saved with its slot's registration (written
//   durably, so it goes back with the data if the server does: a snapshot restored keeps the
//   system id and timeline, and starting past its WAL end would skip new commits). Table-less
//   events have no row to say they are done: each brought again would be published again. It
//   saves at most every kSaveEvery (a statement and a commit: four a second cost nothing beside a
//   producer's thousands, and a crash then brings again at most a quarter second's events).
// No I/O here: CdcSource reads and writes the saved position (cdc_sql).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "cdc/replication_stream.hpp"

namespace outbox::detail {

class ResumePosition {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kSaveEvery{250};

  // The furthest position confirmed on `server`'s system and timeline; 0 (the slot's) otherwise.
  [[nodiscard]] cdc::Lsn start_from(const cdc::SystemIdentity& server) const;
  // A table-less slot's saved position as read back (pg_lsn text, "" for none): 0 when none.
  [[nodiscard]] static cdc::Lsn start_from_saved(std::string_view saved);
  // The stream confirmed `lsn` on `server`: kept when further, or on another server or timeline.
  void confirmed(const cdc::SystemIdentity& server, cdc::Lsn lsn);

  // Whether a table-less relay saves `lsn` now; then saved() once it has.
  [[nodiscard]] bool save_due(cdc::Lsn lsn, Clock::time_point now) const;
  void saved(cdc::Lsn lsn, Clock::time_point now);

 private:
  std::string system_id_;
  std::uint32_t timeline_ = 0;
  cdc::Lsn done_ = 0;
  cdc::Lsn saved_ = 0;
  Clock::time_point next_save_;
};

}  // namespace outbox::detail
