#pragma once
// How `outbox quarantine list` shows an event. Every text field comes from the database, where
// any writer may have put anything: control characters are escaped so they cannot act on the
// operator's terminal (see common/printable.hpp).

#include <string>
#include <vector>

#include "outbox/quarantine.hpp"
#include "outbox/reconcile.hpp"

namespace outbox::cli {

// Two lines, each ending in '\n': what it is and why, then the broker's last error.
std::string quarantined_text(const QuarantinedEvent& event);

// One JSON object on one line ('\n' ended), non-ASCII written as \u escapes.
std::string quarantined_json(const QuarantinedEvent& event);

// `outbox reconcile list`: the same two lines and JSON for an event in doubt.
std::string in_doubt_text(const InDoubtEvent& event);
std::string in_doubt_json(const InDoubtEvent& event);

// Event ids an operator named, in the order given, each once (`retry ID ID` is one event).
// Throws InvalidArgument for one that is not a UUID, naming `list_command` to find them.
std::vector<EventId> parse_event_ids(const std::vector<std::string>& texts,
                                     const std::string& list_command);

}  // namespace outbox::cli
