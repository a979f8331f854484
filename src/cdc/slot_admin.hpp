#pragma once
// The catalog side of logical replication, over an ordinary session: publications, slots as
// pg_replication_slots shows them, and the server's clock and WAL. Each statement has one function
// that returns what it read (replication_stream.hpp does what needs a replication connection).
// No outbox table here (relay/cdc/cdc_sql.hpp has those). Errors: pg::exec's DatabaseError.

#include <libpq-fe.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cdc/pgoutput.hpp"
#include "cdc/replication_stream.hpp"

namespace outbox::cdc {

// SHOW wal_level.
std::string wal_level(PGconn* conn);
// `table` (a quoted, qualified name) as its oid.
std::uint32_t table_oid(PGconn* conn, const std::string& table);

struct PublicationState {
  bool exists = false;     // a publication of that name
  bool has_table = false;  // and it publishes the table
};
PublicationState publication_state(PGconn* conn, const std::string& publication,
                                   const std::string& table);
// The statement that makes `publication` publish `table` (with the row filter `filter`, "" or
// " WHERE (...)"): CREATE PUBLICATION ... WITH (publish = `publish`), or ALTER ... ADD TABLE when
// it exists without the table. Returned for the caller to run, and to show a role that may not.
std::string publication_statement(PGconn* conn, const PublicationState& state,
                                  const std::string& publication, const std::string& table,
                                  const std::string& filter, const std::string& publish);
// The publication publishes `table` with a row filter or a column list, or leaves inserts or
// updates out (false when it does not publish the table at all).
bool publication_narrowed(PGconn* conn, const std::string& publication, const std::string& table);
// How many of `names` exist, and the server's WAL flush position now.
struct PublicationsPresent {
  std::size_t present = 0;
  std::optional<Lsn> flushed;
};
PublicationsPresent publications_present(PGconn* conn, const std::vector<std::string>& names);

// A slot as pg_replication_slots shows it, with the WAL it holds back and has not confirmed
// measured from where the server is now (its replay position on a standby): the one reading of
// `outbox status`, the slot gauges and `outbox cdc drop`.
struct ServerSlot {
  std::string name;
  bool ours = false;  // logical, pgoutput, of this database: a slot an outbox relay may use
  int walsender = 0;  // the walsender streaming it (active_pid); 0: none
  std::string wal_status;
  std::optional<std::int64_t> retained_bytes;  // nullopt: its WAL is gone (or never reserved)
  std::optional<std::int64_t> unconfirmed_bytes;
};
// Every pgoutput slot of this database, by name.
std::vector<ServerSlot> our_slots(PGconn* conn);
// The slot of that name, of any kind or database; nullopt when there is none.
std::optional<ServerSlot> find_slot(PGconn* conn, const std::string& slot);

// pg_drop_replication_slot (SQLSTATE 55006: in use; 42704: missing).
void drop_slot(PGconn* conn, const std::string& slot);

// WAL the slot holds back (from its restart_lsn) and has not confirmed, in bytes, and the
// server's clock; nullopt when the slot is missing (or has no position yet).
struct SlotLag {
  std::int64_t retained_bytes = 0;
  std::int64_t unconfirmed_bytes = 0;
  PgTimestamp server_time = 0;
};
std::optional<SlotLag> slot_lag(PGconn* conn, const std::string& slot);

enum class SlotState : std::uint8_t { active, inactive, missing };
// The walsender streaming the slot: nullopt when the slot is missing, 0 when none streams it.
std::optional<int> slot_holder(PGconn* conn, const std::string& slot);
// Whether a walsender streams the slot, and how many transactions (of other sessions) have been
// writing for over a second: creating a slot waits for every transaction writing at that moment.
struct SlotActivity {
  SlotState state = SlotState::missing;
  std::int64_t long_writers = 0;
};
SlotActivity slot_activity(PGconn* conn, const std::string& slot);

// The server's clock and its WAL flush position now (nullopt when that does not parse).
struct ClockAndFlush {
  PgTimestamp server_time = 0;
  Lsn flushed = 0;
};
std::optional<ClockAndFlush> clock_and_flush(PGconn* conn);

// The shard count a slot name says after its base name: "" is 1 shard, "_<i>_of_<n>" exactly as
// shard_slot_name writes it is n; anything else is not a sharding of that base (nullopt). Pure.
std::optional<unsigned> sharding_of(std::string_view rest);

}  // namespace outbox::cdc
