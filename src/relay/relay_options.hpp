#pragma once
// RelayOptions checked before a relay starts: each option that cannot work is refused, naming it.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "outbox/relay.hpp"

namespace outbox::detail {

// The largest values the relay accepts: a claim's row limit is a PostgreSQL int and a larger
// batch only lengthens each claim; a relay needs about three times its byte budget in memory,
// and a budget past 1 TiB is a typo, not a plan.
inline constexpr std::size_t kMaxBatchSize = 100000;
inline constexpr std::uint64_t kMaxInFlightBytes = std::uint64_t{1} << 40;
inline constexpr std::uint64_t kMinWalBudget = std::uint64_t{1} << 20;  // cdc.wal_budget, when set
// A WAL budget past 1 PiB is a typo (no disk holds it); the cap also keeps it an int64 of bytes,
// what PostgreSQL's pg_lsn arithmetic returns.
inline constexpr std::uint64_t kMaxWalBudget = std::uint64_t{1} << 50;
inline constexpr std::chrono::milliseconds kMaxTakeover = std::chrono::hours(1);

// `options` with a relay id (host-pid-random when empty), or InvalidArgument naming what is
// wrong. `shortest_idle_wait`: the loop's first idle wait, the least idle_poll_max may be.
RelayOptions checked(RelayOptions options, std::chrono::milliseconds shortest_idle_wait);

}  // namespace outbox::detail
