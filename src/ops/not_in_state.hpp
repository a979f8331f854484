#pragma once
// Why events an operator named are not in the state an action needs (quarantined, in doubt): one
// line per such id, in the order given. Shared by `quarantine retry` and `reconcile`.

#include <span>
#include <string>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/schema.hpp"

struct pg_conn;
typedef struct pg_conn PGconn;

namespace outbox::detail {

// `state_column`: the column set while in the state ("quarantined_at", "in_doubt_at"); `pending`:
// the line for a pending row without it ("pending, not quarantined"). Lines "<id>: not found",
// "<id>: published at T", "<id>: skipped at T", "<id>: <pending>".
std::vector<std::string> not_in_state(PGconn* conn, const SchemaName& schema,
                                      std::span<const EventId> event_ids, const char* state_column,
                                      const char* pending);

}  // namespace outbox::detail
