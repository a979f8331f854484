// The gap-aware inbox's rules for one aggregate, case by case. No I/O.
#include "inbox/sequence_plan.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace outbox::detail {
namespace {

PlanEvent fresh(std::int64_t sequence, std::size_t index) {
  return {sequence, false, index, false, Decision::none, false};
}

PlanEvent held(std::int64_t sequence, std::size_t index, bool blocking = false,
               Decision decision = Decision::none) {
  return {sequence, true, index, blocking, decision, false};
}

// The steps as text: "apply 4", "hold 6", "held:apply 5", ... in the order they run.
std::vector<std::string> steps(const AggregatePlan& plan) {
  static const char* const kNames[] = {"apply", "hold", "park", "duplicate", "forget", "skip"};
  std::vector<std::string> out;
  for (const Step& step : plan.steps) {
    out.push_back(std::string(step.held ? "held:" : "") + kNames[static_cast<int>(step.kind)] +
                  " " + std::to_string(step.sequence));
  }
  return out;
}

using Steps = std::vector<std::string>;

TEST(SequencePlan, TheNextSequencesApplyInOrderWhateverOrderTheyCameIn) {
  const auto plan = plan_aggregate(3, false, {fresh(5, 0), fresh(4, 1)});
  EXPECT_EQ(steps(plan), (Steps{"apply 4", "apply 5"}));
  EXPECT_TRUE(plan.position_moved);
  EXPECT_EQ(plan.position, 5);
  EXPECT_EQ(plan.steps[0].index, 1U);
}

TEST(SequencePlan, ANewAggregateStartsAtOne) {
  EXPECT_EQ(steps(plan_aggregate(std::nullopt, false, {fresh(1, 0)})), (Steps{"apply 1"}));
  const auto late = plan_aggregate(std::nullopt, false, {fresh(2, 0)});
  EXPECT_EQ(steps(late), (Steps{"hold 2"}));
  EXPECT_EQ(late.steps[0].reason, "waiting for sequence 1 of its aggregate (none applied yet)");
  EXPECT_FALSE(late.position_moved);
  EXPECT_EQ(late.position, std::nullopt);
}

TEST(SequencePlan, StartAtFirstSeenBeginsAtTheLowestSequenceAtHand) {
  const auto plan = plan_aggregate(std::nullopt, true, {fresh(9, 0), fresh(7, 1)});
  EXPECT_EQ(steps(plan), (Steps{"apply 7", "hold 9"}));
  EXPECT_EQ(plan.position, 7);
  // With a position, the option changes nothing.
  EXPECT_EQ(steps(plan_aggregate(3, true, {fresh(7, 0)})), (Steps{"hold 7"}));
}

TEST(SequencePlan, ASkipAheadIsHeldWithTheMissingSequenceNamed) {
  const auto plan = plan_aggregate(3, false, {fresh(6, 0), fresh(4, 1)});
  EXPECT_EQ(steps(plan), (Steps{"apply 4", "hold 6"}));
  EXPECT_EQ(plan.steps[1].reason, "waiting for sequence 5 of its aggregate (4 applied)");
  EXPECT_EQ(plan.position, 4);
}

TEST(SequencePlan, TheMissingOneLetsItsHeldSuccessorsThrough) {
  const auto plan = plan_aggregate(4, false, {held(6, 0), held(7, 1), held(9, 2), fresh(5, 0)});
  EXPECT_EQ(steps(plan), (Steps{"apply 5", "held:apply 6", "held:apply 7"}));
  EXPECT_EQ(plan.position, 7);  // 9 stays held: 8 is missing
}

TEST(SequencePlan, RepeatsOfAppliedSequencesAreSuppressed) {
  // The rewind after a PostgreSQL crash: k, k+1 applied, then k again (another delivery).
  EXPECT_EQ(steps(plan_aggregate(5, false, {fresh(4, 0), fresh(5, 1), fresh(6, 2)})),
            (Steps{"duplicate 4", "duplicate 5", "apply 6"}));
  // A held row whose sequence was applied meanwhile is forgotten, not applied.
  EXPECT_EQ(steps(plan_aggregate(5, false, {held(5, 0)})), (Steps{"held:forget 5"}));
  // Two events with one sequence in one batch: the first applies, the second is a repeat.
  EXPECT_EQ(steps(plan_aggregate(0, false, {fresh(1, 0), fresh(1, 1)})),
            (Steps{"apply 1", "duplicate 1"}));
}

TEST(SequencePlan, AnEventToParkStopsItsAggregate) {
  PlanEvent failing = fresh(4, 0);
  failing.park = true;
  const auto plan = plan_aggregate(3, false, {failing, fresh(5, 1)});
  EXPECT_EQ(steps(plan), (Steps{"park 4", "hold 5"}));
  EXPECT_EQ(plan.steps[1].reason, "waiting behind parked sequence 4 of its aggregate");
  EXPECT_FALSE(plan.position_moved);
}

TEST(SequencePlan, AParkedRowWaitsForADecisionEvenWhenNext) {
  EXPECT_EQ(steps(plan_aggregate(3, false, {held(4, 0, true), fresh(5, 0)})), (Steps{"hold 5"}));
}

TEST(SequencePlan, ReleaseAppliesAcrossAGapAndItsSuccessorsFollow) {
  const auto plan =
      plan_aggregate(3, false, {held(6, 0, false, Decision::release), held(7, 1), held(9, 2)});
  EXPECT_EQ(steps(plan), (Steps{"held:apply 6", "held:apply 7"}));
  EXPECT_EQ(plan.position, 7);
  // A failed row released is tried again.
  EXPECT_EQ(steps(plan_aggregate(3, false, {held(4, 0, true, Decision::release)})),
            (Steps{"held:apply 4"}));
}

TEST(SequencePlan, SkipMovesPastWithoutAnEffect) {
  const auto plan = plan_aggregate(3, false, {held(4, 0, true, Decision::skip), held(5, 1)});
  EXPECT_EQ(steps(plan), (Steps{"held:skip 4", "held:apply 5"}));
  EXPECT_EQ(plan.position, 5);
}

TEST(SequencePlan, ADecisionDoesNotPassAnEarlierParkedRow) {
  EXPECT_TRUE(
      steps(plan_aggregate(3, false, {held(4, 0, true), held(6, 1, false, Decision::release)}))
          .empty());
}

TEST(SequencePlan, ADecisionAcrossAGapAppliesWhatIsHeldBelowItFirst) {
  // 5 waits for 4; 7 is released: the gaps at 4 and 6 are accepted, 5 is not left behind.
  const auto plan = plan_aggregate(
      3, false, {held(5, 0), held(7, 1, false, Decision::release), fresh(6, 0), held(9, 2)});
  EXPECT_EQ(steps(plan), (Steps{"held:apply 5", "apply 6", "held:apply 7"}));
  EXPECT_EQ(plan.position, 7);
  // A skip accepts them too; what is held past it still waits.
  EXPECT_EQ(steps(plan_aggregate(3, false, {held(5, 0), held(6, 1, true, Decision::skip)})),
            (Steps{"held:apply 5", "held:skip 6"}));
}

TEST(SequencePlan, AReleasedEventToParkIsParkedNotApplied) {
  PlanEvent released = held(4, 0, true, Decision::release);
  released.park = true;
  EXPECT_EQ(steps(plan_aggregate(3, false, {released, held(5, 1)})), (Steps{"held:park 4"}));
}

TEST(SequencePlan, AHeldRowToParkIsParkedInPlace) {
  PlanEvent row = held(4, 0);
  row.park = true;
  EXPECT_EQ(steps(plan_aggregate(3, false, {row, held(5, 1)})), (Steps{"held:park 4"}));
}

}  // namespace
}  // namespace outbox::detail
