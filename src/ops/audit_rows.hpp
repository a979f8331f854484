#pragma once
// The PostgreSQL side of every destination's audit (outbox/audit.hpp). A destination brings what
// it holds (AuditedMessages) and which rows of the window are its own (RowFilter); the rest, the
// window checks, the rows, lost, phantom, duplicated and not applied, is the same for all.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "outbox/audit.hpp"
#include "outbox/event.hpp"

namespace outbox::detail {

// One message the destination holds: its outbox event id (nil when it has none) and whether it
// was published in the window [begin_ms, end_ms).
using AuditedMessages = std::vector<std::pair<EventId, bool>>;
// Whether a row of the window (its aggregate_type and event_type) goes to this destination.
using RowFilter = std::function<bool(const Event&)>;
// Reads the destination from `from_ms` (the window's start less the slack) to its end when the
// read began.
using DestinationReader = std::function<AuditedMessages(std::int64_t from_ms, std::int64_t begin_ms,
                                                        std::int64_t end_ms)>;

// Throws InvalidArgument for a missing start, a read timeout or slack out of range.
void check_audit_window(const AuditWindow& options);

AuditReport run_audit(const AuditWindow& options, const RowFilter& belongs,
                      const DestinationReader& read_destination);

}  // namespace outbox::detail
