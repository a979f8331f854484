#pragma once
// resolve_commit (outbox/transaction.hpp) over any driver: the questions it asks, as text
// statements with text parameters answered as text cells. libpq's (ask_on) and libpqxx's
// (outbox/pqxx.hpp) drivers share this one implementation.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "outbox/transaction.hpp"

namespace outbox::detail {

using Cell = std::optional<std::string>;  // nullopt: NULL
using Rows = std::vector<std::vector<Cell>>;
// Runs one statement; a failure is thrown as DatabaseError with its SQLSTATE.
using Ask = std::function<Rows(const std::string& sql, const std::vector<std::string>& params)>;

Ask ask_on(PGconn* conn);

// pg_xact_status. In an open transaction block, `ask` must keep an error from aborting it (each
// question in a savepoint): an id "in the future" fails the first question.
TransactionStatus transaction_status(const Ask& ask, std::uint64_t transaction_id);

// resolve_commit(conn, schema, transaction_id, event_id, timeout) with `ask` for the connection.
TransactionStatus resolve_commit(const Ask& ask, const SchemaName& schema,
                                 std::uint64_t transaction_id, const EventId& event_id,
                                 std::chrono::milliseconds timeout);

}  // namespace outbox::detail
