// The relay's send window (relay/send_window.hpp): tickets, the event and byte bounds, and
// broker reports turned into outcomes, without any I/O.

#include "relay/send_window.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace outbox::detail {
namespace {

Event event_of(std::size_t payload_bytes, std::size_t header_bytes = 2) {
  Event e;
  e.event_id = EventId::generate();
  e.aggregate_type = "order";
  e.aggregate_id = "o-1";
  e.aggregate_sequence = 1;
  e.payload = std::string(payload_bytes, 'p');
  e.headers = std::string(header_bytes, 'h');
  return e;
}

DeliveryReport report(std::uint64_t ticket, DeliveryOutcome outcome, std::string error = {}) {
  DeliveryReport r;
  r.ticket = ticket;
  r.outcome = outcome;
  r.error = std::move(error);
  return r;
}

TEST(SendWindow, EachEventGetsItsOwnTicketAndCountsItsPayloadAndHeaderBytes) {
  SendWindow window(10, 1000);
  const auto [first, stored] = window.add(event_of(100, 20), "claim-1");
  EXPECT_EQ(stored.payload.size(), 100U);
  const auto [second, unused] = window.add(event_of(50, 10), "claim-1");
  EXPECT_NE(first, second);
  EXPECT_EQ(window.size(), 2U);
  EXPECT_EQ(window.bytes(), 180U);
  EXPECT_EQ(window.byte_room(), 820U);
  EXPECT_EQ(window.room(), 8U);
  EXPECT_EQ(window.in_flight().at(first).token, "claim-1");
}

TEST(SendWindow, ReportsBecomeOutcomesWithTheTokenTheEventWasSentUnder) {
  SendWindow window(10, 1000);
  const Event a = event_of(10);
  const Event b = event_of(10);
  const Event c = event_of(10);
  const auto ta = window.add(a, "t-a").first;
  const auto tb = window.add(b, "t-b").first;
  const auto tc = window.add(c, "t-c").first;
  const auto summary = window.take({report(ta, DeliveryOutcome::published),
                                    report(tb, DeliveryOutcome::permanent_failure, "too large"),
                                    report(tc, DeliveryOutcome::unknown, "timed out")});
  EXPECT_EQ(summary.published, 1U);
  EXPECT_EQ(summary.failed, 2U);
  EXPECT_TRUE(window.empty());
  EXPECT_EQ(window.bytes(), 0U);
  ASSERT_EQ(window.published().size(), 1U);
  EXPECT_EQ(window.published()[0].event_id, a.event_id);
  EXPECT_EQ(window.published()[0].token, "t-a");
  ASSERT_EQ(window.failed().size(), 2U);
  EXPECT_EQ(window.failed()[0].token, "t-b");
  EXPECT_TRUE(window.failed()[0].permanent);
  // The quarantine reason says "permanent failure"; the last error is the broker's words alone
  // (the admin page showed "permanent failure: permanent_failure: too large").
  EXPECT_EQ(window.failed()[0].error, "too large");
  EXPECT_FALSE(window.failed()[1].permanent) << "an unknown outcome is retried, never final";
  EXPECT_EQ(window.failed()[1].error, "unknown: timed out") << "a retried one says its kind";
  EXPECT_EQ(window.unrecorded(), 3U);
  // An ack in the same batch says the broker works.
  EXPECT_FALSE(summary.broker_error.has_value());
}

// After a reconnect the relay moves its claims to the new session: what it moved carries the new
// token, in flight or reported; what it could not move (taken over meanwhile) and streamed
// events (no token) keep theirs.
TEST(SendWindow, RetokenMovesOnlyTheNamedClaimsInFlightAndReported) {
  SendWindow window(10, 1000);
  const Event moved_in_flight = event_of(10);
  const Event lost = event_of(10);
  const Event streamed = event_of(10);
  const Event reported = event_of(10);
  const auto t_moved = window.add(moved_in_flight, "old:1").first;
  const auto t_lost = window.add(lost, "old:1").first;
  const auto t_streamed = window.add(streamed, "", 0, Origin::unclaimed).first;
  const auto t_reported = window.add(reported, "old:2").first;
  window.take({report(t_reported, DeliveryOutcome::published)});
  window.retoken({moved_in_flight.event_id.to_string(), streamed.event_id.to_string(),
                  reported.event_id.to_string()},
                 "new:1");
  EXPECT_EQ(window.in_flight().at(t_moved).token, "new:1");
  EXPECT_EQ(window.in_flight().at(t_lost).token, "old:1");
  EXPECT_EQ(window.in_flight().at(t_streamed).token, "") << "an unclaimed event holds no claim";
  EXPECT_EQ(window.in_flight().at(t_streamed).origin, Origin::unclaimed);
  ASSERT_EQ(window.published().size(), 1U);
  EXPECT_EQ(window.published()[0].token, "new:1");
}

TEST(SendWindow, OnlyTransientFailuresWithoutAnAckBlameTheBroker) {
  SendWindow window(10, 1000);
  const auto t1 = window.add(event_of(1), "t").first;
  auto summary = window.take({report(t1, DeliveryOutcome::permanent_failure, "too large")});
  EXPECT_FALSE(summary.broker_error.has_value()) << "a permanent failure is the event's fault";
  const auto t2 = window.add(event_of(1), "t").first;
  summary = window.take({report(t2, DeliveryOutcome::retryable_failure, "all brokers down")});
  ASSERT_TRUE(summary.broker_error.has_value());
  EXPECT_EQ(*summary.broker_error, "all brokers down");
}

TEST(SendWindow, AReportForNoEventInFlightIsCountedAndIgnored) {
  SendWindow window(10, 1000);
  const auto ticket = window.add(event_of(1), "t").first;
  const auto summary = window.take({report(ticket + 100, DeliveryOutcome::published),
                                    report(ticket, DeliveryOutcome::published),
                                    report(ticket, DeliveryOutcome::published)});
  EXPECT_EQ(summary.unknown_tickets, 2U) << "a second report for the same ticket too";
  EXPECT_EQ(window.published().size(), 1U);
}

TEST(SendWindow, AFetchWaitsForRoomForTheEventTheLastFetchStoppedAt) {
  SendWindow window(10, 100);
  window.add(event_of(58), "t");  // 60 bytes held, 40 left
  EXPECT_TRUE(window.allows_a_fetch());
  window.set_waiting(50);
  EXPECT_FALSE(window.allows_a_fetch()) << "the waiting event needs 50, 40 are left";
  EXPECT_EQ(window.room_beyond_waiting(), 0U);
  window.set_waiting(30);
  EXPECT_TRUE(window.allows_a_fetch());
  EXPECT_EQ(window.room_beyond_waiting(), 10U);
}

TEST(SendWindow, AnEventLargerThanTheBudgetGoesAloneIntoAnEmptyWindow) {
  SendWindow window(10, 100);
  window.set_waiting(500);
  EXPECT_TRUE(window.allows_a_fetch()) << "empty: the large event goes alone";
  const auto ticket = window.add(event_of(498), "t").first;
  EXPECT_EQ(window.byte_room(), 0U);
  EXPECT_FALSE(window.allows_a_fetch()) << "nothing else while it is out";
  window.take({report(ticket, DeliveryOutcome::published)});
  EXPECT_TRUE(window.allows_a_fetch());
}

TEST(SendWindow, AFullWindowAllowsNoFetch) {
  SendWindow window(2, 1000);
  window.add(event_of(1), "t");
  window.add(event_of(1), "t");
  EXPECT_EQ(window.room(), 0U);
  EXPECT_FALSE(window.allows_a_fetch());
}

TEST(SendWindow, TheObserverSeesEachReportWithItsEvent) {
  SendWindow window(10, 1000);
  const Event e = event_of(3);
  const auto ticket = window.add(e, "t").first;
  std::vector<EventId> seen;
  window.take({report(ticket, DeliveryOutcome::published)},
              [&](const SendWindow::InFlight& item, const DeliveryReport& r) {
                EXPECT_EQ(r.ticket, ticket);
                seen.push_back(item.event.event_id);
              });
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0], e.event_id);
}

}  // namespace
}  // namespace outbox::detail
