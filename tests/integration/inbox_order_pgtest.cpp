// The gap-aware inbox (InboxOrdering) against PostgreSQL 15: each case of the design made on
// purpose (the next applied, a repeat suppressed, a skip-ahead held then let through, the rewind
// k, k+1, k, parking, an operator's release and skip), twins on one new aggregate, and the
// consumers' applier that parks an effect failing again and again.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "inbox/apply_batch.hpp"
#include "outbox/inbox.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

InboxOrdering ordered(std::chrono::milliseconds park_after = 5min) {
  InboxOrdering ordering;
  ordering.enabled = true;
  ordering.park_after = park_after;
  return ordering;
}

ConsumedEvent event(const std::string& aggregate, std::int64_t sequence) {
  ConsumedEvent e;
  e.event_id = EventId::generate();
  e.aggregate_type = "order";
  e.aggregate_id = aggregate;
  e.aggregate_sequence = sequence;
  e.event_type = "OrderChanged";
  e.schema_version = 1;
  e.payload = R"({"n":)" + std::to_string(sequence) + "}";
  return e;
}

class InboxOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = fresh_schema();
    pg::exec(conn(), "CREATE TABLE " + schema_.table("applied") +
                         " (n bigserial, aggregate_id text, sequence bigint, payload bytea)");
  }
  // The effect: one row per application, in the order they ran.
  Inbox::Effect record() {
    return [this](PGconn* c, const ConsumedEvent& e) {
      pg::exec(c,
               "INSERT INTO " + schema_.table("applied") +
                   " (aggregate_id, sequence, payload) VALUES ($1, $2, decode($3, 'hex'))",
               {e.aggregate_id.c_str(), std::to_string(e.aggregate_sequence).c_str(),
                hex(e.payload).c_str()});
    };
  }
  static std::string hex(const std::string& bytes) {
    std::string out;
    for (const unsigned char c : bytes) out += fmt::format("{:02x}", c);
    return out;
  }
  // "a1 a2 b1": what was applied, in order.
  std::string applied() {
    const auto rows = pg::exec(
        conn(), "SELECT aggregate_id || sequence FROM " + schema_.table("applied") + " ORDER BY n");
    std::string out;
    for (int i = 0; i < rows.rows(); ++i) out += (i ? " " : "") + std::string(rows.text(i, 0));
    return out;
  }
  long long held_rows(const std::string& where = "true") {
    return count(conn(),
                 "SELECT count(*) FROM " + schema_.table("inbox_parked") + " WHERE " + where);
  }
  void decide(const EventId& id, const char* decision) {
    pg::exec(conn(),
             "UPDATE " + schema_.table("inbox_parked") +
                 " SET decision = $2, decided_by = 'test' WHERE event_id = $1::uuid",
             {id.to_string().c_str(), decision});
  }
  OrderedBatchResult batch(const Inbox& inbox, std::vector<ConsumedEvent> events,
                           const std::map<EventId, ParkRequest>& park = {}) {
    return inbox.process_in_order(conn(), events, record(), park);
  }
  PGconn* conn() { return connection_.get(); }
  pg::Connection connection_ = connect();
  SchemaName schema_;
};

using Results = std::vector<InboxResult>;

TEST_F(InboxOrderTest, TheNextSequencesApplyAndARepeatIsSuppressed) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto e1 = event("a", 1), e2 = event("a", 2);
  EXPECT_EQ(batch(inbox, {e2, e1}).results, (Results{InboxResult::applied, InboxResult::applied}));
  EXPECT_EQ(applied(), "a1 a2");  // in sequence order, not in the order they came
  EXPECT_EQ(batch(inbox, {e1}).results, Results{InboxResult::duplicate});
  EXPECT_EQ(count(conn(), "SELECT last_sequence FROM " + schema_.table("inbox_aggregates")), 2);
}

TEST_F(InboxOrderTest, ASkipAheadIsHeldThenAppliedWhenItsPredecessorComes) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto e1 = event("a", 1), e2 = event("a", 2), e3 = event("a", 3), b1 = event("b", 1);
  EXPECT_EQ(batch(inbox, {e1, e3, b1}).results,
            (Results{InboxResult::applied, InboxResult::held, InboxResult::applied}));
  EXPECT_EQ(applied(), "a1 b1");
  EXPECT_EQ(held_rows("kind = 'waiting' AND reason = "
                      "'waiting for sequence 2 of its aggregate (1 applied)'"),
            1);
  // Not applied, so not in processed_events: the audit counts it "not applied".
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM " + schema_.table("processed_events") +
                      " WHERE event_id = $1::uuid",
                  {e3.event_id.to_string().c_str()}),
            0);
  EXPECT_EQ(batch(inbox, {e3}).results, Results{InboxResult::duplicate});  // redelivered: kept
  const auto closing = batch(inbox, {e2});
  EXPECT_EQ(closing.results, Results{InboxResult::applied});
  EXPECT_EQ(closing.applied_from_held, 1U);
  EXPECT_EQ(applied(), "a1 b1 a2 a3");
  EXPECT_EQ(held_rows(), 0);
}

TEST_F(InboxOrderTest, TheRewindAfterAPostgresCrashIsSuppressed) {
  // k, k+1, then k again: the same event re-published, or another event given sequence k.
  const Inbox inbox(schema_, "projection", ordered());
  const auto e1 = event("a", 1), e2 = event("a", 2);
  batch(inbox, {e1, e2});
  EXPECT_EQ(batch(inbox, {e1, event("a", 1), event("a", 2)}).results,
            (Results{InboxResult::duplicate, InboxResult::duplicate, InboxResult::duplicate}));
  EXPECT_EQ(applied(), "a1 a2");
}

TEST_F(InboxOrderTest, AHeldEventComesBackWhole) {
  const Inbox inbox(schema_, "projection", ordered());
  ConsumedEvent odd = event("a", 2);
  odd.payload = std::string("\x00\xff{\"x\":\"\\\"\"}", 12);  // NUL, a byte no UTF-8 has
  odd.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  odd.topic = "orders";
  odd.partition = 7;
  odd.offset = 12345;
  odd.schema_version = 3;
  batch(inbox, {odd});
  ConsumedEvent seen;
  inbox.process_in_order(conn(), std::vector{event("a", 1)},
                         [&](PGconn* c, const ConsumedEvent& e) {
                           if (e.aggregate_sequence == 2) seen = e;
                           record()(c, e);
                         });
  EXPECT_EQ(seen.event_id, odd.event_id);
  EXPECT_EQ(seen.payload, odd.payload);
  EXPECT_EQ(seen.traceparent, odd.traceparent);
  EXPECT_EQ(seen.topic, "orders");
  EXPECT_EQ(seen.partition, 7);
  EXPECT_EQ(seen.offset, 12345);
  EXPECT_EQ(seen.schema_version, 3);
  EXPECT_EQ(seen.event_type, "OrderChanged");
}

TEST_F(InboxOrderTest, AnEventWaitingPastParkAfterIsCountedParked) {
  const Inbox patient(schema_, "patient", ordered());
  const Inbox hasty(schema_, "hasty", ordered(0ms));
  const auto e3 = event("a", 3);
  batch(patient, {e3});
  batch(hasty, {e3});
  EXPECT_EQ(patient.waiting(conn()).waiting, 1U);
  EXPECT_EQ(patient.waiting(conn()).parked, 0U);
  EXPECT_EQ(hasty.waiting(conn()).waiting, 0U);
  EXPECT_EQ(hasty.waiting(conn()).parked, 1U);
}

TEST_F(InboxOrderTest, AParkedEventHoldsItsAggregateAndTheOthersGoOn) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1), a2 = event("a", 2), b1 = event("b", 1);
  const auto result =
      batch(inbox, {a1, a2, b1}, {{a1.event_id, ParkRequest{"it failed 10 times"}}});
  EXPECT_EQ(result.results,
            (Results{InboxResult::parked, InboxResult::held, InboxResult::applied}));
  EXPECT_EQ(result.parked, std::vector{a1.event_id});
  EXPECT_EQ(applied(), "b1");
  EXPECT_EQ(held_rows("kind = 'failed' AND reason = 'it failed 10 times'"), 1);
  EXPECT_EQ(inbox.waiting(conn()).parked, 1U);  // failed counts as parked at once
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 0U);  // no decision yet
  decide(a1.event_id, "release");
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 1U);
  EXPECT_EQ(applied(), "b1 a1 a2");
  EXPECT_EQ(held_rows(), 0);
}

TEST_F(InboxOrderTest, SkipGoesOnWithoutTheEffect) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1), a2 = event("a", 2);
  batch(inbox, {a1, a2}, {{a1.event_id, ParkRequest{"bad"}}});
  decide(a1.event_id, "skip");
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 1U);
  EXPECT_EQ(applied(), "a2");
  EXPECT_EQ(batch(inbox, {a1}).results, Results{InboxResult::duplicate});
}

TEST_F(InboxOrderTest, ReleasingAWaitingEventAcceptsTheGap) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1), a2 = event("a", 2), a3 = event("a", 3);
  batch(inbox, {a1, a3});
  decide(a3.event_id, "release");
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 1U);
  EXPECT_EQ(applied(), "a1 a3");
  // The missing one, late, is below the position now: suppressed, never applied after 3, and
  // not recorded as applied (the audit counts it not applied).
  EXPECT_EQ(batch(inbox, {a2}).results, Results{InboxResult::duplicate});
  EXPECT_EQ(applied(), "a1 a3");
  EXPECT_EQ(count(conn(),
                  "SELECT count(*) FROM " + schema_.table("processed_events") +
                      " WHERE event_id = $1::uuid",
                  {a2.event_id.to_string().c_str()}),
            0);
}

TEST_F(InboxOrderTest, ADecisionAcrossAGapAppliesTheEventsHeldBelowItFirst) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1), a3 = event("a", 3), a5 = event("a", 5);
  batch(inbox, {a1, a3, a5});  // 3 waits for 2, 5 for 4
  decide(a5.event_id, "release");
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 1U);
  EXPECT_EQ(applied(), "a1 a3 a5");  // 3 is not left behind below the new position
  EXPECT_EQ(held_rows(), 0);
}

TEST_F(InboxOrderTest, AHeldEventOfAnUnknownVersionIsParkedAsSuchWhenItsTurnComes) {
  const Inbox inbox(schema_, "projection", ordered());
  ConsumedEvent a2 = event("a", 2);
  a2.schema_version = 9;
  const Inbox::UnknownVersion unknown = [](const ConsumedEvent& e) {
    return e.schema_version > 1 ? std::string("too new") : std::string();
  };
  EXPECT_EQ(
      inbox.process_in_order(conn(), std::vector{a2, event("a", 3)}, record(), {}, unknown).results,
      (Results{InboxResult::held, InboxResult::held}));
  const auto result =
      inbox.process_in_order(conn(), std::vector{event("a", 1)}, record(), {}, unknown);
  EXPECT_EQ(result.parked, std::vector{a2.event_id});
  EXPECT_EQ(applied(), "a1");
  EXPECT_EQ(held_rows("kind = 'unknown_version' AND reason = 'too new'"), 1);
  EXPECT_EQ(held_rows("kind = 'waiting'"), 1);
}

TEST_F(InboxOrderTest, AFailureBehindAReleasedEventLeavesItsDecisionForTheNextRound) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1), a2 = event("a", 2);
  batch(inbox, {a1, a2}, {{a1.event_id, ParkRequest{"bad"}}});
  decide(a1.event_id, "release");
  EXPECT_THROW(inbox.carry_out_decisions(conn(),
                                         [&](PGconn* c, const ConsumedEvent& e) {
                                           if (e.event_id == a2.event_id) {
                                             throw std::runtime_error("a2 failed");
                                           }
                                           record()(c, e);
                                         }),
               std::runtime_error);
  // a2's own failure: a1's release stands, a2 is not called released or failed.
  EXPECT_EQ(held_rows("decision = 'release'"), 1);
  EXPECT_EQ(held_rows("kind = 'waiting'"), 1);
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 1U);
  EXPECT_EQ(applied(), "a1 a2");
}

TEST_F(InboxOrderTest, AReleasedEventWhoseEffectFailsAgainStaysParkedWithTheError) {
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1);
  batch(inbox, {a1}, {{a1.event_id, ParkRequest{"first failure"}}});
  decide(a1.event_id, "release");
  EXPECT_THROW(inbox.carry_out_decisions(
                   conn(), [](PGconn*, const ConsumedEvent&) { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_EQ(held_rows("decision IS NULL AND kind = 'failed' AND reason = "
                      "'released, and its effect failed again: boom'"),
            1);
  EXPECT_EQ(inbox.carry_out_decisions(conn(), record()).decided, 0U);  // withdrawn: no loop
  EXPECT_EQ(applied(), "");
}

TEST_F(InboxOrderTest, StartAtFirstSeenTakesAnAggregateFromTheMiddleOfItsHistory) {
  InboxOrdering ordering = ordered();
  ordering.start_at_first_seen = true;
  const Inbox inbox(schema_, "late", ordering);
  EXPECT_EQ(batch(inbox, {event("a", 8), event("a", 7)}).results,
            (Results{InboxResult::applied, InboxResult::applied}));
  EXPECT_EQ(applied(), "a7 a8");
  EXPECT_EQ(batch(inbox, {event("a", 10)}).results, Results{InboxResult::held});
}

TEST_F(InboxOrderTest, TwinsOnANewAggregateTakeItsEventsOneAfterTheOther) {
  // Without the lock on the aggregate's row, the twin with sequence 2 would read "none applied",
  // hold it, and nothing would ever let it through.
  const Inbox inbox(schema_, "projection", ordered());
  const auto a1 = event("a", 1), a2 = event("a", 2);
  std::atomic<bool> first_inside{false};
  std::thread first([&] {
    auto c = connect();
    inbox.process_in_order(c.get(), std::vector{a1}, [&](PGconn* pc, const ConsumedEvent& e) {
      record()(pc, e);
      first_inside = true;
      std::this_thread::sleep_for(300ms);
    });
  });
  while (!first_inside) std::this_thread::sleep_for(5ms);
  auto c2 = connect();
  const auto second = inbox.process_in_order(c2.get(), std::vector{a2}, record());
  first.join();
  EXPECT_EQ(second.results, Results{InboxResult::applied});
  EXPECT_EQ(applied(), "a1 a2");
}

TEST_F(InboxOrderTest, RefusesWhatItCannotOrder) {
  const Inbox unordered(schema_, "plain");
  EXPECT_THROW(unordered.process_in_order(conn(), std::vector{event("a", 1)}, record()),
               InvalidArgument);
  const Inbox inbox(schema_, "projection", ordered());
  EXPECT_THROW(inbox.process_in_order(conn(), std::vector{event("a", 0)}, record()),
               InvalidArgument);
  InboxOrdering negative = ordered(-1ms);
  EXPECT_THROW(Inbox(schema_, "x", negative), InvalidArgument);
  // Past PostgreSQL's interval range, every batch that holds an event would fail.
  EXPECT_THROW(Inbox(schema_, "x", ordered(std::chrono::milliseconds::max())), InvalidArgument);
  EXPECT_EQ(held_rows(), 0);
}

TEST_F(InboxOrderTest, TheApplierRejectsWhatItCannotOrderAndAppliesTheRest) {
  detail::InboxApplier applier(schema_, "projection", ordered(), {});
  ConsumedEvent no_sequence = event("a", 0);
  ConsumedEvent not_text = event(std::string("b\xff", 2), 1);
  bool effect_threw = false;
  const auto counts =
      applier.apply(conn(), {event("c", 1), no_sequence, event("d", 1), not_text, event("e", 1)},
                    record(), effect_threw);
  EXPECT_EQ(counts.rejected, 2U);
  EXPECT_EQ(counts.applied, 3U);
  EXPECT_EQ(applied(), "c1 d1 e1");
}

TEST_F(InboxOrderTest, TheApplierParksAnEffectThatKeepsFailing) {
  InboxOrdering ordering = ordered();
  ordering.park_failing_after = 3;
  detail::InboxApplier applier(schema_, "projection", ordering);
  const auto a1 = event("a", 1), a2 = event("a", 2), b1 = event("b", 1);
  const Inbox::Effect effect = [&](PGconn* c, const ConsumedEvent& e) {
    if (e.event_id == a1.event_id) throw std::runtime_error("the payment API said no");
    record()(c, e);
  };
  bool effect_threw = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_THROW(applier.apply(conn(), {a1, a2, b1}, effect, effect_threw), std::runtime_error);
    EXPECT_TRUE(effect_threw);
  }
  EXPECT_EQ(applied(), "");
  const auto counts = applier.apply(conn(), {a1, a2, b1}, effect, effect_threw);
  EXPECT_EQ(counts.parked, 1U);
  EXPECT_EQ(counts.held, 1U);
  EXPECT_EQ(counts.applied, 1U);
  EXPECT_EQ(applied(), "b1");
  EXPECT_EQ(held_rows("kind = 'failed' AND reason = 'its effect failed 3 times in a row; the last "
                      "error: the payment API said no'"),
            1);
}

}  // namespace
}  // namespace outbox::testing
