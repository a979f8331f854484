#pragma once
// application_name of PostgreSQL sessions that the CLI looks for in pg_stat_activity.

#include <string_view>

namespace outbox::cli {

// The relay's sessions. src/relay/relay.cpp opens them under this name, written there as a literal
// for now: when the library gets a constant for it, this becomes an alias of that constant.
inline constexpr std::string_view kRelayApplicationName = "outbox-relay";

}  // namespace outbox::cli
