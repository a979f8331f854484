#pragma once
// The change-data-capture relay's statements on the outbox tables (its catalog and slot statements
// are cdc/slot_admin.hpp; the table path's, relay_sql.hpp): the check before streamed events go,
// the writing of table-less events, the slot registration of a table-less relay and its saved
// position, and the slots of other shardings. One function or reader per statement.

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cdc/replication_stream.hpp"
#include "outbox/schema.hpp"
#include "pg/connection.hpp"

namespace outbox::cdc_sql {

// A change-data-capture relay's look before it sends streamed events: $1 uuid[] event ids,
// $2 aggregate_type[], $3 aggregate_id[], $4 sequence[], $5 bool[] whether to ask about lower
// sequences, $6 text[] a table-less event's transaction id ('' or NULL for a row's). Rows, only for
// events that must wait: (1-based position, visible, lower pending). An event whose row this
// snapshot does not see yet must not be announced; one with a lower sequence of its aggregate still
// pending must not overtake it.
std::string check_streamed(const SchemaName& schema);
// The marks of streamed events ($1 uuid[]): published, for the rows no relay claimed and no one
// skipped. Returns the ids it marked, as text; one marked before (its first answer lost with the
// connection) matches again and changes nothing. The polling relay's mark_published does the same
// for a NULL token, through the CTEs its successor claim needs; this one is a single update by
// primary key (docs/PERFORMANCE.md: 9% less server time a row).
std::string mark_streamed(const SchemaName& schema);
std::vector<std::string> read_mark_streamed(const pg::Result& result);
// Table-less events into the table as pending rows ($1..$9: ids, aggregate types and ids,
// sequences, event types, schema versions, payloads and headers as text, occurred_at; $10 bool:
// touched, claimable at once). Returns the ids written.
std::string materialize_table_less(const SchemaName& schema);
// Of the ids $1 (uuid[]), those with no row: not written, their sequences held by other rows.
std::string materialize_clashes(const SchemaName& schema);
// The count of the transactions ($1: xid8 as text) not visible to this session yet.
std::string invisible_transactions();
// check_streamed's rows: 0-based positions, sorted.
struct StreamCheck {
  std::vector<std::size_t> invisible;  // not committed as far as other sessions see: wait
  // A lower sequence pending, or the row is the table path's (touched, quarantined, claimed):
  // leave it and its aggregate to the table path.
  std::vector<std::size_t> blocked;
  std::vector<std::size_t> finished;  // marked or skipped already: done, not sent again
};
StreamCheck read_check_streamed(const pg::Result& result);

// The oldest transaction a snapshot of the server saw running (pg_snapshot_xmin): every
// transaction with a lower id had ended by then, so one the stream brought (committed) is visible
// to every snapshot taken since. Trusted for kFresh after it was read: a 32-bit id is read in the
// epoch nearest that xmin, which holds while fewer than 2^31 transactions passed since (an xmin
// kept for days of traffic could read a new id as an old one).
class VisibleXmin {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kFresh{1};
  // Whether transaction `xid` (32 bits, as pgoutput's Begin gives it) had ended at the last
  // refresh, made less than kFresh before `now`. False before the first and once stale.
  [[nodiscard]] bool ended_before(std::uint32_t xid, Clock::time_point now) const;
  void refresh(PGconn* conn, Clock::time_point now);
  // For tests: the full xmin (epoch and id) as refresh() would set it at `at`.
  void set(std::uint64_t xmin, Clock::time_point at) {
    xmin_ = xmin;
    at_ = at;
  }

 private:
  std::uint64_t xmin_ = 0;
  Clock::time_point at_{};
};

// Whether the outbox table holds any row at all (pending, published, skipped, in any state).
bool table_has_rows(PGconn* conn, const SchemaName& schema);

// Idle pgoutput slots of this database whose names start with `base`, except those registered
// for table-less events (the only copy of their events).
std::vector<std::string> idle_slots_of(PGconn* conn, const SchemaName& schema,
                                       const std::string& base);

// The relay registered for table-less events on `slot`; nullopt when none is.
std::optional<std::string> registered_by(PGconn* conn, const SchemaName& schema,
                                         const std::string& slot);
// Registers `slot` for table-less events by `relay_id` (witness_since set the first time: WAL
// before it may predate the witness publication). True when it was registered before.
bool register_slot(PGconn* conn, const SchemaName& schema, const std::string& slot,
                   const std::string& relay_id);
// Where a registered slot's witness began (nullopt: not known).
std::optional<cdc::Lsn> witness_since(PGconn* conn, const SchemaName& schema,
                                      const std::string& slot);
// A table-less slot's saved position on `system_id` as pg_lsn text ("" when none), and saving one
// (durably; never backwards on the same system).
std::string saved_position(PGconn* conn, const SchemaName& schema, const std::string& slot,
                           const std::string& system_id);
void save_position(PGconn* conn, const SchemaName& schema, const std::string& slot, cdc::Lsn lsn,
                   const std::string& system_id);

}  // namespace outbox::cdc_sql
