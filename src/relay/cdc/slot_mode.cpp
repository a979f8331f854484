#include "relay/cdc/slot_mode.hpp"

#include <algorithm>

namespace outbox::detail::slot_mode {

namespace {

// The least a released relay waits before it streams again (the slot is looked at every second).
constexpr std::chrono::seconds kLeastReleased{1};

template <class... Visitors>
struct Overloaded : Visitors... {
  using Visitors::operator()...;
};
template <class... Visitors>
Overloaded(Visitors...) -> Overloaded<Visitors...>;  // clang before 17 needs the guide

}  // namespace

Flags flags(const SlotMode& mode) {
  return std::visit(Overloaded{[](const Streaming&) { return Flags{}; },
                               [](const Standby&) {
                                 return Flags{false, true};
                               },
                               [](const Released&) {
                                 return Flags{true, false};
                               }},
                    mode);
}

std::string_view name(const SlotMode& mode) {
  return std::visit(Overloaded{[](const Streaming&) { return std::string_view("streaming"); },
                               [](const Standby&) { return std::string_view("standby"); },
                               [](const Released&) { return std::string_view("released"); }},
                    mode);
}

ClaimHorizon table_horizon(const SlotMode& mode) {
  const auto* released = std::get_if<Released>(&mode);
  if (released == nullptr) return ClaimHorizon::touched_only();
  if (released->streamed_out) return released->streamed_horizon;
  return released->slot_taken ? ClaimHorizon::touched_only() : ClaimHorizon::everything();
}

std::int64_t certain_position(std::int64_t position_time, std::size_t open_events,
                              std::int64_t caught_up_time) {
  return std::max(position_time, open_events == 0 ? caught_up_time : 0);
}

ClaimHorizon stream_horizon(std::int64_t certain_position, std::chrono::microseconds grace) {
  if (certain_position == 0) return ClaimHorizon::touched_only();
  return ClaimHorizon::before(certain_position - grace.count());
}

Entered enter_standby(const SlotMode& from, Clock::time_point now) {
  return {Standby{now, true}, !polling(from)};
}

Released release(ClaimHorizon stream_horizon, int walsender, Clock::time_point now) {
  Released released;
  released.since = now;
  released.streamed_horizon = stream_horizon;
  released.walsender = walsender;
  return released;
}

void table_claimed(SlotMode& mode, bool reached_end, bool began_mid_way, std::size_t got,
                   std::size_t limit) {
  if (auto* released = std::get_if<Released>(&mode)) {
    released->table_caught_up = reached_end && !began_mid_way && got < limit;
  }
}

bool streamed_out(const SlotMode& mode) {
  const auto* released = std::get_if<Released>(&mode);
  return released != nullptr && released->streamed_out;
}

bool nothing_streamed_out(SlotMode& mode) {
  auto* released = std::get_if<Released>(&mode);
  if (released == nullptr || !released->streamed_out) return false;
  released->streamed_out = false;
  released->table_caught_up = false;  // the claims so far stopped at the old horizon
  return true;
}

void walsender_gone(SlotMode& mode) {
  if (auto* released = std::get_if<Released>(&mode)) released->walsender = 0;
}

int walsender(const SlotMode& mode) {
  const auto* released = std::get_if<Released>(&mode);
  return released == nullptr ? 0 : released->walsender;
}

Next slot_seen(SlotMode& mode, SlotSeen seen, Clock::time_point now, Clock::duration grace) {
  const bool active = seen.state == cdc::SlotState::active;
  Next next;
  if (auto* standby = std::get_if<Standby>(&mode)) {
    next.horizon_changed = standby->slot_taken != active;
    standby->slot_taken = active;
    // A standby that finds the slot missing (dropped while it waited, or its streaming relay's
    // and its own start crossed the drop) creates it at once, or no relay would.
    next.step = active ? Next::Step::wait : Next::Step::try_stream;
    return next;
  }
  auto* released = std::get_if<Released>(&mode);
  if (released == nullptr) return next;  // streaming: nothing to decide
  // Our own walsender, still exiting, is not another relay.
  const bool taken = active && released->walsender == 0;
  next.horizon_changed = released->slot_taken != taken;
  released->slot_taken = taken;
  if (active) return next;
  if (released->streamed_out || !released->table_caught_up || released->walsender != 0 ||
      now - released->since < std::max<Clock::duration>(grace, kLeastReleased)) {
    return next;
  }
  // Not while one has been writing for a second already: creating the slot waits for it (such a
  // transaction may be why the slot went over the budget).
  if (seen.state == cdc::SlotState::missing && seen.long_writers > 0) {
    next.step = Next::Step::wait_for_writers;
    return next;
  }
  next.step = Next::Step::try_stream;
  return next;
}

void stream_try_failed(SlotMode& mode, Clock::time_point now) {
  if (auto* released = std::get_if<Released>(&mode)) released->since = now;
}

}  // namespace outbox::detail::slot_mode
