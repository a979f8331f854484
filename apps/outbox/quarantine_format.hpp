#pragma once
// How `outbox quarantine list` shows an event. Every text field comes from the database, where
// any writer may have put anything: control characters are escaped so they cannot act on the
// operator's terminal (see common/printable.hpp).

#include <string>

#include "outbox/quarantine.hpp"

namespace outbox::cli {

// Two lines, each ending in '\n': what it is and why, then the broker's last error.
std::string quarantined_text(const QuarantinedEvent& event);

// One JSON object on one line ('\n' ended), non-ASCII written as \u escapes.
std::string quarantined_json(const QuarantinedEvent& event);

}  // namespace outbox::cli
