#pragma once
// The publications a change-data-capture relay streams (the outbox table's, and for a table-less
// relay the sequence counters', which prove which messages are a producer's: "the witness"):
// made when missing, checked, and what to do when a slot's WAL is older than one of them.

#include <libpq-fe.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cdc/replication_stream.hpp"
#include "outbox/relay.hpp"

namespace outbox::detail {

class Publications {
 public:
  // Names them (ConfigError when the witness's name would not fit).
  explicit Publications(const RelayOptions& options);

  // Creates the publications when missing (ConfigError for what needs an operator: wal_level, a
  // role that may not create them, a witness made by hand that leaves out what the proof needs),
  // and reads the outbox table's oid.
  void ensure(PGconn* conn);

  [[nodiscard]] const std::string& slot() const { return slot_; }
  [[nodiscard]] const std::string& outbox() const { return publication_; }
  [[nodiscard]] const std::string& witness() const { return witness_; }  // "" without table-less
  // The outbox table's oid now: a dropped one's WAL is not ours.
  [[nodiscard]] std::uint32_t table_oid() const { return table_oid_; }

  // The publications the stream reads: the outbox one's, and the witness unless the slot's WAL
  // is older than that (see outlived).
  [[nodiscard]] std::vector<std::string> streamed() const;

  // The stream failed with "publication ... does not exist" although every one exists now: the
  // slot's unread WAL predates it. Returns false when one is really missing. Otherwise a slot of
  // the table path's relay is made again (drop_slot_first), and a table-less slot is read
  // without the witness up to unproven_until. Throws ConfigError when nothing can be done.
  bool outlived(PGconn* conn);
  // Once true after outlived(): the caller drops the slot before it streams again.
  bool take_drop_slot_first();
  // Table-less messages up to this position are taken unproven (0: none).
  [[nodiscard]] cdc::Lsn unproven_until() const { return unproven_until_; }
  void proven_from_now() { unproven_until_ = 0; }

 private:
  void ensure_publication(PGconn* conn, const std::string& name, const std::string& table,
                          const std::string& publish, const std::string& filter);
  void check_witness_shape(PGconn* conn, const std::string& counters);

  const RelayOptions& options_;
  std::string slot_;         // the shard's
  std::string publication_;  // the shard's
  std::string witness_;      // <publication>_seq, for a table-less relay
  std::uint32_t table_oid_ = 0;
  // PostgreSQL 15 cannot decode changes from before a publication existed under its name, so a
  // slot upgraded onto table-less is read without the witness up to here (the server's WAL when
  // that was found), then again with it.
  cdc::Lsn unproven_until_ = 0;
  bool witness_retried_ = false;  // unproven_until_ was witness_since once: next time, now
  bool drop_slot_first_ = false;  // the slot outlived its publication: made again (not table-less)
};

}  // namespace outbox::detail
