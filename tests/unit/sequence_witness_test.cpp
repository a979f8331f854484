// SequenceWitness: a table-less message is taken only with a change of its aggregate's counter to
// its last sequence, read before it in the same transaction, one message per change.

#include "relay/cdc/sequence_witness.hpp"

#include <gtest/gtest.h>

namespace outbox::cdc {
namespace {

Relation counters(std::uint32_t id = 77) {
  Relation relation;
  relation.relation_id = id;
  relation.namespace_name = "outbox";
  relation.name = "outbox_aggregate_sequences";
  relation.columns = {
      {1, "aggregate_type", 25, -1}, {1, "aggregate_id", 25, -1}, {0, "last_sequence", 20, -1}};
  return relation;
}

std::vector<TupleColumn> row(std::string_view type, std::string_view id,
                             std::string_view sequence) {
  return {{ColumnKind::text, type}, {ColumnKind::text, id}, {ColumnKind::text, sequence}};
}

TEST(SequenceWitness, VouchesOnceForACounterChangeOfTheSameTransaction) {
  SequenceWitness witness;
  ASSERT_EQ(witness.map(counters()), std::nullopt);
  witness.begin();
  witness.note(77, row("payment", "acct-42", "7"));
  EXPECT_FALSE(witness.vouch("payment", "acct-42", 6)) << "another sequence";
  EXPECT_FALSE(witness.vouch("payment", "acct-41", 7)) << "another aggregate";
  EXPECT_FALSE(witness.vouch("order", "acct-42", 7)) << "another type";
  EXPECT_TRUE(witness.vouch("payment", "acct-42", 7));
  EXPECT_FALSE(witness.vouch("payment", "acct-42", 7)) << "one change vouches for one message";
  // Two statements of one transaction on one aggregate: two changes, two messages.
  witness.note(77, row("payment", "acct-42", "8"));
  witness.note(77, row("payment", "acct-42", "9"));
  EXPECT_TRUE(witness.vouch("payment", "acct-42", 8));
  EXPECT_TRUE(witness.vouch("payment", "acct-42", 9));
}

// The forged message of issue 23 (item 2): a role that cannot write the counters emits a message
// in a transaction with no counter change.
TEST(SequenceWitness, NothingNotedVouchesForNothing) {
  SequenceWitness witness;
  ASSERT_EQ(witness.map(counters()), std::nullopt);
  witness.begin();
  EXPECT_FALSE(witness.vouch("payment", "acct-42", 7));
  // A change of an earlier transaction does not carry over.
  witness.note(77, row("payment", "acct-42", "7"));
  witness.begin();
  EXPECT_FALSE(witness.vouch("payment", "acct-42", 7));
}

TEST(SequenceWitness, ChangesOfOtherTablesOrUnreadableRowsVouchForNothing) {
  SequenceWitness witness;
  witness.note(77, row("payment", "acct-42", "7"));  // not mapped yet
  EXPECT_FALSE(witness.vouch("payment", "acct-42", 7));
  ASSERT_EQ(witness.map(counters()), std::nullopt);
  witness.note(78, row("payment", "acct-42", "7"));  // another table
  witness.note(77, row("payment", "acct-42", "7x"));
  witness.note(77, row("payment", "acct-42", "-7"));
  witness.note(77, row("payment", "acct-42", ""));
  witness.note(77, {{ColumnKind::text, "payment"}, {ColumnKind::text, "acct-42"}});
  witness.note(
      77,
      {{ColumnKind::text, "payment"}, {ColumnKind::text, "acct-42"}, {ColumnKind::binary, "7"}});
  EXPECT_FALSE(witness.vouch("payment", "acct-42", 7));
  EXPECT_FALSE(witness.vouch("payment", "acct-42", -7));
}

TEST(SequenceWitness, ColumnsAreFoundByNameInAnyOrder) {
  Relation relation = counters();
  std::swap(relation.columns[0], relation.columns[2]);
  SequenceWitness witness;
  ASSERT_EQ(witness.map(relation), std::nullopt);
  witness.note(77, {{ColumnKind::text, "3"}, {ColumnKind::text, "a-1"}, {ColumnKind::text, "t"}});
  EXPECT_TRUE(witness.vouch("t", "a-1", 3));
  relation.columns.pop_back();
  const std::optional<std::string> problem = witness.map(relation);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("aggregate_type"), std::string::npos) << *problem;
  EXPECT_FALSE(witness.knows(77));
}

}  // namespace
}  // namespace outbox::cdc
