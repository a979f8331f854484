#pragma once
// Tearing change data capture down: a slot no relay streams any more keeps every byte of WAL
// written since its position, until the disk fills or max_slot_wal_keep_size invalidates it.
// `outbox cdc drop --slot NAME` calls this; `outbox status`, the admin page and the alert
// OutboxSlotAbandoned report such slots.

#include <cstdint>
#include <string>
#include <vector>

#include "outbox/schema.hpp"

namespace outbox {

struct CdcDropReport {
  std::int64_t retained_bytes = 0;        // the WAL the slot held, now free to recycle
  bool was_table_less = false;            // it was registered for table-less events (--force)
  std::vector<std::string> publications;  // dropped with it (no slot of this database left)
  std::vector<std::string> other_slots;   // pgoutput slots of this database still there
};

// Drops the logical slot `slot` of this database, and when no other pgoutput slot of this
// database is left, the publications of `schema`'s outbox tables that publish nothing else. In one
// transaction, the slot last (its drop is not undone by a rollback). Refuses (InvalidArgument,
// nothing dropped):
//   - a slot that does not exist or is not a pgoutput slot of this database;
//   - a slot a walsender streams (stop that relay, and its standbys, first);
//   - a slot registered for the table-less events of another schema (drop it with that schema);
//   - without `force`, a slot registered for this schema's table-less events (the only copy of
//     those not yet published: dropping it loses them; with `force` the registration goes too);
//   - without `force`, a slot no relay of this schema is known to use (no relay row names it, and
//     it has no default name): it may be another tool's (Debezium, a logical replica).
// Throws DatabaseError (42501 without the right: dropping a slot needs REPLICATION, a publication
// its owner).
CdcDropReport drop_cdc(PGconn* conn, const SchemaName& schema, const std::string& slot, bool force);

}  // namespace outbox
