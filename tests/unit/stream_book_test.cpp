// The change-data-capture relay's stream books: per-aggregate order, what is left to the table,
// and how far the confirmed position may move. No I/O.
#include "relay/cdc/stream_book.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace outbox::cdc {
namespace {

Event event(const std::string& aggregate, std::int64_t sequence) {
  Event e;
  e.event_id = EventId::generate();
  e.aggregate_type = "order";
  e.aggregate_id = aggregate;
  e.aggregate_sequence = sequence;
  e.event_type = "E";
  return e;
}

// Reads one transaction of `events` ending at `end_lsn`; returns them.
std::vector<Event> read(StreamBook& book, std::vector<Event> events, Lsn end_lsn,
                        std::uint64_t bytes = 10) {
  book.begin();
  for (const Event& e : events) book.add(e, bytes);
  book.commit(end_lsn);
  return events;
}

std::vector<std::string> ids(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events)
    out.push_back(e.aggregate_id + "#" + std::to_string(e.aggregate_sequence));
  return out;
}

std::vector<std::string> ids(const std::vector<const Event*>& events) {
  std::vector<std::string> out;
  for (const Event* e : events)
    out.push_back(e->aggregate_id + "#" + std::to_string(e->aggregate_sequence));
  return out;
}

// Hands out everything it may (no check blocks anything); returns what goes.
std::vector<Event> send_all(StreamBook& book) {
  book.next(100, 1000000, true);
  return book.decide({});
}

TEST(StreamBook, AnAggregatesNextEventWaitsUntilItsPredecessorIsPublished) {
  StreamBook book;
  const auto first = read(book, {event("a", 1), event("b", 1)}, 100);
  const auto second = read(book, {event("a", 2)}, 200);
  const StreamBook::Candidates candidates = book.next(100, 1000000, true);
  EXPECT_EQ(ids(candidates.events), (std::vector<std::string>{"a#1", "b#1"}));
  EXPECT_EQ(candidates.needs_check, (std::vector<bool>{false, false}))
      << "sequence 1: nothing lower";
  EXPECT_EQ(book.decide({}).size(), 2U);
  EXPECT_TRUE(send_all(book).empty()) << "a#2 waits behind a#1";

  book.published(first[0].event_id);
  const StreamBook::Candidates after = book.next(100, 1000000, true);
  EXPECT_EQ(ids(after.events), (std::vector<std::string>{"a#2"}));
  EXPECT_EQ(after.needs_check, (std::vector<bool>{false})) << "the book saw a#1 published";
  EXPECT_EQ(after.follows_own_send, (std::vector<bool>{true})) << "and sent it itself";
  book.decide({});
}

// A mark that was fenced (someone else completes the row): its aggregate's next event is asked
// about, since the other may hold it too (its mark claims successors).
TEST(StreamBook, AfterAnEventPublishedByAnotherTheNextIsAskedAbout) {
  StreamBook book;
  const auto first = read(book, {event("a", 1)}, 100);
  read(book, {event("a", 2)}, 200);
  send_all(book);
  book.published_by_another(first[0].event_id);
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  EXPECT_EQ(ids(next.events), (std::vector<std::string>{"a#2"}));
  EXPECT_EQ(next.follows_own_send, (std::vector<bool>{false}));
  book.decide({});
  EXPECT_EQ(book.confirmable(), 100U) << "a#1 is done all the same";
}

// What the source needs to send an event without the check statement: that its predecessor went
// out through this book's own send, and its transaction's id (visible once it ended).
TEST(StreamBook, ACandidateSaysWhetherItFollowsTheBooksOwnSendAndNamesItsTransaction) {
  StreamBook book;
  book.begin(700);
  const Event a1 = event("a", 1), a2 = event("a", 2), b4 = event("b", 4);
  book.add(a1, 10);
  book.commit(100);
  book.begin(701);
  book.add(a2, 10);
  book.add(b4, 10);
  book.commit(200);
  const StreamBook::Candidates first = book.next(100, 1000000, true);
  EXPECT_EQ(ids(first.events), (std::vector<std::string>{"a#1", "b#4"}));
  EXPECT_EQ(first.follows_own_send, (std::vector<bool>{false, false}))
      << "a first event, and one whose predecessor the book never saw";
  EXPECT_EQ(first.xids, (std::vector<std::uint32_t>{700, 701}));
  book.decide({});
  book.published(a1.event_id);
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  EXPECT_EQ(ids(next.events), (std::vector<std::string>{"a#2"}));
  EXPECT_EQ(next.follows_own_send, (std::vector<bool>{true}));
  EXPECT_EQ(next.xids, (std::vector<std::uint32_t>{701}));
  book.decide({});
}

// `outbox replay` made a#1 pending again in the table: a#2, read after the replay's message,
// must be checked against the table, not sent because the book saw a#1 published.
TEST(StreamBook, AfterAReplayTheNextEventOfAnAggregateIsChecked) {
  StreamBook book;
  const auto first = read(book, {event("a", 1)}, 100);
  send_all(book);
  book.published(first[0].event_id);
  book.forget_published();
  read(book, {event("a", 2)}, 200);
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  EXPECT_EQ(ids(next.events), (std::vector<std::string>{"a#2"}));
  EXPECT_EQ(next.needs_check, (std::vector<bool>{true}));
  book.decide({});
}

// The replay came while a#1 was out: its outcome, after the replay, must not tell that nothing
// lower is pending either (the replay may have made a lower one pending again).
TEST(StreamBook, AReplayWhileAnEventIsOutForgetsItsPublicationToo) {
  StreamBook book;
  const auto first = read(book, {event("a", 1)}, 100);
  send_all(book);
  read(book, {event("a", 2)}, 200);  // waits behind a#1
  book.forget_published();
  book.published(first[0].event_id);
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  EXPECT_EQ(ids(next.events), (std::vector<std::string>{"a#2"}));
  EXPECT_EQ(next.needs_check, (std::vector<bool>{true}));
  EXPECT_EQ(next.follows_own_send, (std::vector<bool>{false}));
  book.decide({});
}

TEST(StreamBook, ThePositionMovesPastATransactionOnlyWhenItAndAllBeforeItAreDone) {
  StreamBook book;
  const auto first = read(book, {event("a", 1)}, 100);
  const auto second = read(book, {event("b", 1), event("c", 1)}, 200);
  send_all(book);
  book.published(second[0].event_id);
  book.published(second[1].event_id);
  EXPECT_EQ(book.confirmable(), 0U) << "the first transaction is still out";
  book.published(first[0].event_id);
  EXPECT_EQ(book.confirmable(), 200U);
  EXPECT_EQ(book.open_events(), 0U);
}

TEST(StreamBook, AnEventWithALowerSequencePendingIsLeftToTheTableAndItsPositionMoves) {
  StreamBook book;
  read(book, {event("a", 5), event("b", 3)}, 100);
  const StreamBook::Candidates candidates = book.next(100, 1000000, true);
  EXPECT_EQ(candidates.needs_check, (std::vector<bool>{true, true}));
  const std::vector<Event> go = book.decide({0});
  EXPECT_EQ(ids(go), (std::vector<std::string>{"b#3"}));
  EXPECT_EQ(book.left_to_table(), 1U);
  EXPECT_EQ(book.confirmable(), 0U) << "b#3 is out";
  book.published(go[0].event_id);
  EXPECT_EQ(book.confirmable(), 100U);

  read(book, {event("a", 6)}, 200);
  const StreamBook::Candidates again = book.next(100, 1000000, true);
  EXPECT_EQ(again.needs_check, (std::vector<bool>{true})) << "a is the table's until it says not";
  book.decide({0});
  EXPECT_EQ(book.confirmable(), 200U);
}

TEST(StreamBook, ADeferredCandidateComesBackFirstInLine) {
  StreamBook book;
  const auto events = read(book, {event("a", 1), event("b", 1), event("c", 1)}, 100);
  book.next(100, 1000000, true);
  const std::vector<Event> go = book.decide({}, {0, 2});
  EXPECT_EQ(ids(go), (std::vector<std::string>{"b#1"}));
  EXPECT_TRUE(book.has_candidates());
  EXPECT_EQ(book.waiting_bytes(), 20U);
  const StreamBook::Candidates again = book.next(100, 1000000, true);
  EXPECT_EQ(ids(again.events), (std::vector<std::string>{"a#1", "c#1"}));
  book.decide({});
  for (const Event& e : events) book.published(e.event_id);
  EXPECT_EQ(book.confirmable(), 100U);
}

TEST(StreamBook, AFinishedCandidateIsDoneWithoutASendAndItsSuccessorGoesUnchecked) {
  StreamBook book;
  read(book, {event("a", 1), event("a", 2), event("b", 1)}, 100);
  book.next(100, 1000000, true);
  const std::vector<Event> go = book.decide({}, {}, {0});  // a#1 was marked already
  EXPECT_EQ(ids(go), (std::vector<std::string>{"b#1"}));
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  EXPECT_EQ(ids(next.events), (std::vector<std::string>{"a#2"}));
  EXPECT_FALSE(next.needs_check.front()) << "its predecessor is finished: no lower check";
  EXPECT_FALSE(next.follows_own_send.front())
      << "but someone else published a#1 (a run before a restart): the check asks whether a#2 "
         "was published too";
  const std::vector<Event> second = book.decide({});
  book.published(second.front().event_id);
  EXPECT_EQ(book.confirmable(), 0U) << "b#1 is still out";
  book.published(go.front().event_id);
  EXPECT_EQ(book.confirmable(), 100U);
}

TEST(StreamBook, ASpilledTransactionIsLeftToTheTableAndThePositionMovesPastIt) {
  StreamBook book;
  book.begin();
  book.add(event("a", 1), 600);
  EXPECT_EQ(book.reading_bytes(), 600U);
  book.spill();
  book.add(event("a", 2), 600);  // ignored: the transaction is the table's
  EXPECT_EQ(book.reading_bytes(), 0U);
  book.commit(100);
  EXPECT_EQ(book.confirmable(), 100U);
  EXPECT_EQ(book.left_to_table(), 1U);
  EXPECT_FALSE(book.has_candidates());
  read(book, {event("a", 3)}, 200);
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  EXPECT_EQ(next.needs_check, (std::vector<bool>{true})) << "a#1 and a#2 may still be pending";
  book.decide({0});
  EXPECT_FALSE(book.spilled()) << "the next transaction is read again";
}

TEST(StreamBook, WhatWaitsBehindAFailedEventIsLeftToTheTable) {
  StreamBook book;
  const auto events = read(book, {event("a", 1), event("a", 2), event("a", 3), event("b", 1)}, 100);
  const std::vector<Event> go = send_all(book);
  EXPECT_EQ(ids(go), (std::vector<std::string>{"a#1", "b#1"}));
  book.failed(events[0].event_id);
  EXPECT_EQ(book.left_to_table(), 2U) << "a#2 and a#3";
  EXPECT_TRUE(send_all(book).empty());
  book.published(events[3].event_id);
  EXPECT_EQ(book.confirmable(), 100U);

  read(book, {event("a", 4)}, 200);
  const StreamBook::Candidates later = book.next(100, 1000000, true);
  EXPECT_EQ(later.needs_check, (std::vector<bool>{true})) << "after a failure a#4 is checked";
  book.decide({0});
}

// A table-less event exists only in the stream: the source writes each event the book leaves to
// the table into it, so the book must name every one, and only those.
TEST(StreamBook, TakeLeftNamesEveryEventLeftToTheTableOnceInOrder) {
  StreamBook book;
  book.begin();
  const Event spilled = event("s", 1);
  book.add(spilled, 10);
  book.spill();
  book.commit(50);
  EXPECT_EQ(book.take_left(), (std::vector<EventId>{spilled.event_id}));
  EXPECT_TRUE(book.take_left().empty()) << "each id once";

  const auto events =
      read(book, {event("a", 1), event("a", 2), event("b", 1), event("b", 2), event("c", 1)}, 100);
  const StreamBook::Candidates next = book.next(100, 1000000, true);
  ASSERT_EQ(next.events.size(), 3U);               // a#1, b#1, c#1
  const std::vector<Event> go = book.decide({1});  // b#1 has a lower sequence in the table
  EXPECT_EQ(ids(go), (std::vector<std::string>{"a#1", "c#1"}));
  EXPECT_EQ(book.take_left(), (std::vector<EventId>{events[2].event_id, events[3].event_id}))
      << "b#1, then b#2 behind it";
  book.published(events[4].event_id);
  EXPECT_TRUE(book.take_left().empty()) << "a published event is not left";
  book.failed(events[0].event_id);
  EXPECT_EQ(book.take_left(), (std::vector<EventId>{events[1].event_id}))
      << "a#2 behind the failed a#1; a#1 itself is the failure's to record";
  EXPECT_EQ(book.confirmable(), 100U);
}

TEST(StreamBook, ContainsTheEventsReadAndNotDoneAndThoseOfTheTransactionBeingRead) {
  StreamBook book;
  const Event first = event("a", 1);
  const Event second = event("a", 2);
  book.begin();
  book.add(first, 10);
  EXPECT_TRUE(book.contains(first.event_id)) << "in the transaction being read";
  EXPECT_FALSE(book.contains(second.event_id));
  book.commit(100);
  EXPECT_TRUE(book.contains(first.event_id));
  const std::vector<Event> go = send_all(book);
  ASSERT_EQ(go.size(), 1U);
  book.published(first.event_id);
  EXPECT_FALSE(book.contains(first.event_id)) << "done";
}

// After a reconnect the book is made anew and reads the stream again; an outcome of a send from
// before must not complete the event this book read again and has not sent (it would then be
// handed out with no entry behind it, or its aggregate freed while another event of it is out).
TEST(StreamBook, AnOutcomeOfAnEventNotSentByThisBookChangesNothing) {
  StreamBook book;
  const auto events = read(book, {event("a", 1), event("a", 2)}, 100);
  book.published(events[0].event_id);  // a stale ack: a#1 is read, not sent
  book.failed(events[0].event_id);
  EXPECT_FALSE(book.is_out(events[0].event_id));
  const std::vector<Event> go = send_all(book);
  ASSERT_EQ(ids(go), (std::vector<std::string>{"a#1"}));
  EXPECT_TRUE(book.is_out(events[0].event_id));
  book.failed(events[1].event_id);  // stale: a#2 waits behind a#1
  EXPECT_TRUE(send_all(book).empty()) << "a#2 still waits behind a#1";
  book.published(events[0].event_id);
  EXPECT_EQ(ids(send_all(book)), (std::vector<std::string>{"a#2"}));
  book.published(events[1].event_id);
  EXPECT_EQ(book.confirmable(), 100U);
}

TEST(StreamBook, AKeepaliveMovesThePositionOnlyWithNothingOpen) {
  StreamBook book;
  book.keepalive(50);
  EXPECT_EQ(book.confirmable(), 50U);
  const auto events = read(book, {event("a", 1)}, 100);
  book.keepalive(150);
  EXPECT_EQ(book.confirmable(), 50U) << "a#1 is open";
  send_all(book);
  book.published(events[0].event_id);
  EXPECT_EQ(book.confirmable(), 100U);
  book.begin();
  book.keepalive(300);
  EXPECT_EQ(book.confirmable(), 100U) << "a transaction is being read";
  book.commit(320);
  EXPECT_EQ(book.confirmable(), 320U) << "a transaction without outbox events is done at once";
  book.keepalive(400);
  EXPECT_EQ(book.confirmable(), 400U);
  book.keepalive(390);
  EXPECT_EQ(book.confirmable(), 400U) << "never backwards";
}

TEST(StreamBook, CandidatesStopAtTheByteRoomButOneGoesAloneWhenNothingIsHeld) {
  StreamBook book;
  read(book, {event("a", 1), event("b", 1)}, 100, 600);
  EXPECT_EQ(book.waiting_bytes(), 1200U);
  EXPECT_TRUE(book.next(100, 500, false).events.empty());
  book.decide({});
  EXPECT_EQ(book.next(100, 500, true).events.size(), 1U) << "alone, though larger than the room";
  book.decide({});
  EXPECT_EQ(book.waiting_bytes(), 600U);
  EXPECT_EQ(book.next(1, 1000000, false).events.size(), 1U) << "the limit";
  book.decide({});
}

TEST(StreamBook, OutcomesOfEventsItDoesNotKnowAreIgnored) {
  StreamBook book;
  const auto events = read(book, {event("a", 1)}, 100);
  send_all(book);
  EXPECT_FALSE(book.published(EventId::generate()));  // the table path's
  book.failed(EventId::generate());
  EXPECT_EQ(book.open_events(), 1U);
  EXPECT_TRUE(book.published(events[0].event_id));
  EXPECT_FALSE(book.published(events[0].event_id));  // twice: the second is nothing
  EXPECT_EQ(book.confirmable(), 100U);
}

TEST(StreamBook, IdleAggregatesAreForgottenPastABound) {
  StreamBook book;
  const std::size_t aggregates = StreamBook::kIdleKept + 5000;
  for (std::size_t i = 0; i < aggregates; ++i) {
    const auto events = read(book, {event("a" + std::to_string(i), 1)}, 100 + i);
    send_all(book);
    book.published(events[0].event_id);
  }
  EXPECT_LE(book.tracked_aggregates(), StreamBook::kIdleKept);
  EXPECT_EQ(book.open_events(), 0U);
  EXPECT_EQ(book.confirmable(), 100 + aggregates - 1);
}

// Forgetting goes by when an aggregate last went idle, and never forgets a busy one: one that was
// busy again meanwhile is kept, and still spares its next event the check.
TEST(StreamBook, ForgetsTheAggregateIdleLongestNotOneBusyAgainMeanwhile) {
  StreamBook book;
  Lsn lsn = 100;
  const auto publish = [&](const std::string& aggregate, std::int64_t sequence) {
    const auto events = read(book, {event(aggregate, sequence)}, ++lsn);
    send_all(book);
    book.published(events[0].event_id);
  };
  publish("a", 1);
  publish("b", 1);
  publish("a", 2);  // busy again, idle again: now after b
  for (std::size_t i = 0; i + 1 < StreamBook::kIdleKept; ++i) publish("x" + std::to_string(i), 1);
  EXPECT_EQ(book.tracked_aggregates(), StreamBook::kIdleKept) << "b was forgotten";
  read(book, {event("a", 3), event("b", 2)}, ++lsn);
  const StreamBook::Candidates candidates = book.next(100, 1000000, true);
  EXPECT_EQ(ids(candidates.events), (std::vector<std::string>{"a#3", "b#2"}));
  EXPECT_EQ(candidates.needs_check, (std::vector<bool>{false, true}))
      << "a's #2 is remembered published; what b published is forgotten";
}

// An aggregate with an event out is never forgotten, however many others go idle meanwhile (also
// when it was idle before: it left the idle list).
TEST(StreamBook, NeverForgetsAnAggregateWithAnEventOut) {
  StreamBook book;
  Lsn lsn = 100;
  const auto a0 = read(book, {event("a", 1)}, ++lsn);
  send_all(book);
  book.published(a0[0].event_id);  // a is idle
  const auto a1 = read(book, {event("a", 2)}, ++lsn);
  send_all(book);  // a#2 is out
  for (std::size_t i = 0; i <= StreamBook::kIdleKept; ++i) {
    const auto events = read(book, {event("x" + std::to_string(i), 1)}, ++lsn);
    send_all(book);
    book.published(events[0].event_id);
  }
  EXPECT_EQ(book.tracked_aggregates(), StreamBook::kIdleKept + 1) << "the idle ones, and a";
  EXPECT_TRUE(book.published(a1[0].event_id));
  read(book, {event("a", 3)}, ++lsn);
  const StreamBook::Candidates candidates = book.next(100, 1000000, true);
  EXPECT_EQ(ids(candidates.events), (std::vector<std::string>{"a#3"}));
  EXPECT_EQ(candidates.needs_check, (std::vector<bool>{false}));
  EXPECT_EQ(book.confirmable(), lsn - 1);
}

// The same id read again while the first is not done (rows inserted, deleted and inserted again
// by hand): the same id is the same event. The repeat is dropped, the first is not disturbed, and
// the position moves once it is done.
TEST(StreamBook, DropsAnIdReadAgainWhileOpen) {
  StreamBook book;
  const auto first = read(book, {event("a", 1)}, 100);
  Event again = event("b", 1);
  again.event_id = first[0].event_id;
  read(book, {again}, 200);
  EXPECT_EQ(book.open_events(), 1U);
  EXPECT_EQ(book.left_to_table(), 0U);
  EXPECT_TRUE(book.take_left().empty());
  EXPECT_EQ(book.confirmable(), 0U) << "the first transaction is not done";
  EXPECT_EQ(ids(send_all(book)), (std::vector<std::string>{"a#1"}));
  EXPECT_TRUE(book.published(first[0].event_id));
  EXPECT_EQ(book.open_events(), 0U);
  EXPECT_EQ(book.waiting_bytes(), 0U);
  EXPECT_EQ(book.confirmable(), 200U);
  // Twice in one transaction: the same.
  Event twice = event("c", 1);
  read(book, {twice, twice}, 300);
  EXPECT_EQ(ids(send_all(book)), (std::vector<std::string>{"c#1"}));
  EXPECT_TRUE(book.published(twice.event_id));
  EXPECT_EQ(book.confirmable(), 300U);
  EXPECT_TRUE(book.take_left().empty());
}

TEST(StreamBook, ReadingOutOfOrderIsAProgrammingError) {
  StreamBook book;
  EXPECT_THROW(book.add(event("a", 1), 1), std::logic_error);
  EXPECT_THROW(book.commit(1), std::logic_error);
  book.begin();
  EXPECT_THROW(book.begin(), std::logic_error);
  book.commit(1);
  read(book, {event("a", 1)}, 2);
  book.next(1, 100, true);
  EXPECT_THROW(book.next(1, 100, true), std::logic_error) << "decide() first";
}

}  // namespace
}  // namespace outbox::cdc
