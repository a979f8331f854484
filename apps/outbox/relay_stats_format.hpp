#pragma once
// How `outbox relay` prints its statistics (every --stats-every and at the end): one line a person
// or a log collector reads (text), or one JSON object per line that a program reads (json; `outbox
// bench` does).

#include <nlohmann/json.hpp>
#include <string>

#include "outbox/relay.hpp"

namespace outbox::cli {

// "relay ID: health running, published N, failed N, ..., last error S s ago: ...". The last error
// says how old it is: next to "health running" it is history, not the present.
std::string relay_stats_text(const std::string& relay_id, const RelayStats& stats);

// Every RelayStats field under its own name (numbers as numbers, health as its name), with
// relay_id; last_error and last_error_age_ms are null while there has been no error.
nlohmann::json relay_stats_json(const std::string& relay_id, const RelayStats& stats);

}  // namespace outbox::cli
