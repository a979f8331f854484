#include "inbox/sequence_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace outbox::detail {
namespace {

// What stops the aggregate at the current event: nothing, a missing sequence (an operator's
// decision on a later row overrides it), or a parked row (nothing passes it).
enum class Block : std::uint8_t { none, gap, parked_row };

std::string hold_reason(Block block, std::int64_t position, std::int64_t blocker) {
  if (block == Block::parked_row) {
    return fmt::format("waiting behind parked sequence {} of its aggregate", blocker);
  }
  if (position == 0) {
    return fmt::format("waiting for sequence {} of its aggregate (none applied yet)", blocker);
  }
  return fmt::format("waiting for sequence {} of its aggregate ({} applied)", blocker, position);
}

}  // namespace

AggregatePlan plan_aggregate(std::optional<std::int64_t> position, bool start_at_first_seen,
                             std::vector<PlanEvent> events) {
  std::stable_sort(events.begin(), events.end(), [](const PlanEvent& a, const PlanEvent& b) {
    return a.sequence != b.sequence ? a.sequence < b.sequence : (!a.held && b.held);
  });
  AggregatePlan plan{{}, position, false};
  std::int64_t current = position.value_or(0);
  if (!position && start_at_first_seen && !events.empty()) {
    current = events.front().sequence - 1;
  }
  // The highest operator decision that no parked row or park request precedes: the decision
  // accepts every gap below it, so what is held below it is applied first, in order, never left
  // behind below the new position.
  std::int64_t accept_through = 0;
  for (const PlanEvent& e : events) {
    if (e.sequence <= current) continue;
    if (e.park || (e.held && e.blocking && e.decision == Decision::none)) break;
    if (e.held && e.decision != Decision::none) accept_through = e.sequence;
  }
  Block block = Block::none;
  std::int64_t blocker = 0;  // the sequence a gap waits for, or the parked row's
  const auto push = [&plan](StepKind kind, const PlanEvent& event, std::string reason = {}) {
    plan.steps.push_back({kind, event.held, event.index, event.sequence, std::move(reason)});
  };
  for (const PlanEvent& event : events) {
    if (event.sequence <= current) {
      push(event.held ? StepKind::forget : StepKind::duplicate, event);
      continue;
    }
    const bool accepted = event.sequence <= accept_through;
    if (block == Block::none && !accepted && event.sequence != current + 1) {
      block = Block::gap;
      blocker = current + 1;
    }
    if (block != Block::none) {
      if (!event.held) push(StepKind::hold, event, hold_reason(block, current, blocker));
      continue;  // a held row stays as it is
    }
    if (event.park) {
      push(StepKind::park, event);
      block = Block::parked_row;
      blocker = event.sequence;
      continue;
    }
    if (event.held && event.blocking && event.decision == Decision::none) {
      block = Block::parked_row;  // stays parked until an operator decides
      blocker = event.sequence;
      continue;
    }
    push(event.held && event.decision == Decision::skip ? StepKind::skip : StepKind::apply, event);
    current = event.sequence;
    plan.position_moved = true;
  }
  if (plan.position_moved) plan.position = current;
  return plan;
}

}  // namespace outbox::detail
