#pragma once
// RelayOptions checked before a relay starts: each option that cannot work is refused, naming it.

#include <chrono>

#include "outbox/relay.hpp"

namespace outbox::detail {

// `options` with a relay id (host-pid-random when empty), or InvalidArgument naming what is
// wrong. `shortest_idle_wait`: the loop's first idle wait, the least idle_poll_max may be.
RelayOptions checked(RelayOptions options, std::chrono::milliseconds shortest_idle_wait);

}  // namespace outbox::detail
