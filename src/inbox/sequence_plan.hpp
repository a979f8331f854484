#pragma once
// The gap-aware inbox's decision for one aggregate, without I/O: given the last applied sequence
// and the aggregate's events at hand (fresh from the broker, or held in inbox_parked), which to
// apply, in which order, which to hold, and which are repeats. Unit-tested case by case
// (SequencePlan.*); ordered_inbox.cpp runs it inside the inbox transaction.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbox::detail {

enum class Decision : std::uint8_t { none, release, skip };

// One event of the aggregate.
struct PlanEvent {
  std::int64_t sequence = 0;
  bool held = false;      // a row of inbox_parked (else fresh from the broker)
  std::size_t index = 0;  // into the batch (fresh) or the held rows (held)
  bool blocking = false;  // held only: parked as failed or of an unknown version; waits for a
                          // decision even when it is next
  Decision decision = Decision::none;  // held only: an operator's
  bool park = false;  // park it instead of applying it (its effect failed too often)
};

enum class StepKind : std::uint8_t {
  apply,      // run the effect (a held one is then deleted)
  hold,       // fresh: keep it in inbox_parked as waiting, with `reason`
  park,       // keep it as failed (fresh: insert; held: update); its aggregate waits behind it
  duplicate,  // fresh: already applied (a sequence at or below the position); nothing to do
  forget,     // held: delete the row without an effect (a repeat of an applied sequence)
  skip,       // held: an operator's skip: the position moves past it, no effect, row deleted
};

struct Step {
  StepKind kind = StepKind::apply;
  bool held = false;
  std::size_t index = 0;
  std::int64_t sequence = 0;
  std::string reason;  // hold: why it waits
};

struct AggregatePlan {
  std::vector<Step> steps;               // in the order to run them
  std::optional<std::int64_t> position;  // the last applied sequence after the steps
  bool position_moved = false;           // position differs from the one given
};

// `position`: the last applied sequence (nullopt: none yet). `start_at_first_seen`: with no
// position, begin at the lowest sequence at hand instead of at 1. Order of `events` does not
// matter. Rules (docs/CONSUMING.md, "The gap-aware inbox"): in sequence order, a sequence at or
// below the position is a repeat; the next one is applied unless it is to be parked or is a
// blocking held row without a decision; a released or skipped held row goes through even after
// a gap (the operator accepted it), not past a blocking row; everything after a gap or a block is
// held.
AggregatePlan plan_aggregate(std::optional<std::int64_t> position, bool start_at_first_seen,
                             std::vector<PlanEvent> events);

}  // namespace outbox::detail
