#pragma once
// Whether the change-data-capture relay streams from its slot, and if not, why: the mode as a
// type, and its transitions as pure functions (no I/O; CdcSource applies their effects: logs,
// counters, listening). The transitions are unit-tested without PostgreSQL
// (tests/unit/slot_mode_test.cpp).
//
//   Streaming --(another relay streams the slot)--> Standby --(the slot is free)--> Streaming
//   Streaming --(over the WAL budget: release)----> Released --(caught up, slot free)--> Streaming
//
// Released: this relay let the slot go over cdc.wal_budget and publishes from the table. While
// events it streamed may still be in flight (streamed_out), the table path keeps the horizon the
// stream had (those rows look untouched and would be sent again); then it claims every pending
// row. It streams again from a new slot once the table path has caught up, the walsender that held
// the old slot has left it (it is dropped), at least the horizon grace (at least a second) has
// passed, and no transaction has been writing for over a second (creating a slot waits for them).
// Standby: another relay streams the slot; this one claims touched rows only, and streams once
// the slot is free (a missing slot is created at once).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "cdc/slot_admin.hpp"
#include "relay/claim_horizon.hpp"

namespace outbox::detail::slot_mode {

using Clock = std::chrono::steady_clock;

struct Streaming {
  bool operator==(const Streaming&) const = default;
};
struct Standby {
  Clock::time_point since;
  bool slot_taken = true;  // another relay streams the slot
  bool operator==(const Standby&) const = default;
};
struct Released {
  Clock::time_point since;  // let go, or the last failed try to stream again
  ClaimHorizon streamed_horizon = ClaimHorizon::touched_only();  // the stream's, when let go
  bool streamed_out = true;      // streamed events may still be in flight
  bool table_caught_up = false;  // the last claim found every ready row
  int walsender = 0;             // the walsender that held the slot we let go, until dropped
  bool slot_taken = false;       // another relay streams the (new) slot
  bool operator==(const Released&) const = default;
};
using SlotMode = std::variant<Streaming, Standby, Released>;

// Not streaming: the table path publishes (PollingSource as the source).
[[nodiscard]] inline bool polling(const SlotMode& mode) {
  return !std::holds_alternative<Streaming>(mode);
}

// The flags RelayStats shows: polling_fallback (let go over the budget), slot_standby.
struct Flags {
  bool polling_fallback = false;
  bool slot_standby = false;
  bool operator==(const Flags&) const = default;
};
[[nodiscard]] Flags flags(const SlotMode& mode);

// As outbox_relays.slot_mode says it (migration 15): "streaming", "standby", "released".
[[nodiscard]] std::string_view name(const SlotMode& mode);

// The table path's horizon while polling (Standby: touched rows only; Released: see the top).
[[nodiscard]] ClaimHorizon table_horizon(const SlotMode& mode);

// The table path's horizon while streaming: untouched rows older than the stream's certain
// position (the oldest transaction not done, or, with no event open, a probe that found the
// stream caught up) less the grace. Nothing read yet: touched rows only.
// Times are cdc::PgTimestamp (microseconds since 2000-01-01).
[[nodiscard]] std::int64_t certain_position(std::int64_t position_time, std::size_t open_events,
                                            std::int64_t caught_up_time);
[[nodiscard]] ClaimHorizon stream_horizon(std::int64_t certain_position,
                                          std::chrono::microseconds grace);

// Into Standby (from Streaming, or again); `announce` when it was not polling before.
struct Entered {
  Standby mode;
  bool announce = false;
};
[[nodiscard]] Entered enter_standby(const SlotMode& from, Clock::time_point now);
// Let go over the budget, with the stream's horizon and walsender at that moment.
[[nodiscard]] Released release(ClaimHorizon stream_horizon, int walsender, Clock::time_point now);

// A claim of the table path returned: whether it found every ready row.
void table_claimed(SlotMode& mode, bool reached_end, bool began_mid_way, std::size_t got,
                   std::size_t limit);
// Released: whether streamed events may still be out is to be looked at (the table poll is due).
[[nodiscard]] bool streamed_out(const SlotMode& mode);
// Released: none is out any more; every pending row is claimable from now. True: news.
bool nothing_streamed_out(SlotMode& mode);
// Released: the walsender that held the slot has left it (or another relay took it).
void walsender_gone(SlotMode& mode);
[[nodiscard]] int walsender(const SlotMode& mode);

// What the slot looks like now, and how many transactions have been writing for over a second
// (cdc::slot_activity).
using SlotSeen = cdc::SlotActivity;
struct Next {
  enum class Step : std::uint8_t {
    wait,              // the slot is streamed by another relay, or Released is not done
    wait_for_writers,  // Released, slot missing: creating it would wait for the long writers
    try_stream,
  } step = Step::wait;
  bool horizon_changed = false;  // slot_taken changed: the table horizon with it
  bool operator==(const Next&) const = default;
};
// Looks at the slot while polling: records whether another relay streams it, and says whether to
// try streaming. `grace`: cdc.horizon_grace (at least a second is waited after a release).
Next slot_seen(SlotMode& mode, SlotSeen seen, Clock::time_point now, Clock::duration grace);
// A try to stream found the slot in use or failed: Released waits its grace again from now.
void stream_try_failed(SlotMode& mode, Clock::time_point now);

}  // namespace outbox::detail::slot_mode
