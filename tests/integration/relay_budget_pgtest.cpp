// The relay's memory is bounded by bytes, not rows: a claim (and the mark's successor claim) takes
// rows while their payload and header text fits RelayOptions::max_in_flight_bytes, and a row
// larger than the whole budget goes alone.

#include <gtest/gtest.h>

#include "outbox/discard_sink.hpp"
#include "outbox/relay.hpp"
#include "support/relay_fixture.hpp"
#include "support/test_env.hpp"
#include "support/test_sinks.hpp"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1 << 20;

using RelayBudgetTest = RelayFixture;

// Eight aggregates of two 4 MiB events (the second of each goes out through the mark's successor
// claim), half of them compressible (PostgreSQL stores those in a few KB: the claim must measure
// the text it returns, not the stored size), one 15 MiB event, larger than the 10 MiB budget, and
// one of 7 MiB stored as such (more than half the budget: a relay that holds nothing takes it alone
// without measuring it). At no moment may the relay hold more than the budget, except the large
// one alone.
TEST_F(RelayBudgetTest, ClaimsTakeRowsWhileTheirBytesFitAndALargerRowGoesAlone) {
  const std::string events = schema_.table("outbox_events");
  pg::exec(conn(), "INSERT INTO " + events +
                       " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                       "  payload)"
                       " SELECT gen_random_uuid(), 'order', 'big-' || a, s, 'Step',"
                       "  jsonb_build_object('data', CASE WHEN a % 2 = 1"
                       "    THEN repeat(md5(a::text), 131072)"
                       "    ELSE (SELECT string_agg(md5(g::text || a || s), '')"
                       "          FROM generate_series(1, 131072) g) END)"
                       " FROM generate_series(1, 8) a, generate_series(1, 2) s");
  pg::exec(conn(), "INSERT INTO " + events +
                       " (event_id, aggregate_type, aggregate_id, aggregate_sequence, event_type,"
                       "  payload)"
                       " VALUES (gen_random_uuid(), 'order', 'huge', 1, 'Step',"
                       "  jsonb_build_object('data', repeat('x', 15 * 1024 * 1024))),"
                       "  (gen_random_uuid(), 'order', 'wide', 1, 'Step',"
                       "   jsonb_build_object('data', (SELECT string_agg(md5(g::text), '')"
                       "                               FROM generate_series(1, 229376) g)))");
  ASSERT_LT(count(conn(), "SELECT sum(pg_column_size(payload)) FROM " + events +
                              " WHERE aggregate_id IN ('big-1', 'huge')"),
            1 << 20)
      << "the compressible rows should be stored compressed";
  auto o = options("budget");
  o.max_in_flight_bytes = 10 * kMiB;
  auto counting = std::make_unique<ByteCountingSink>(make_discard_sink());
  ByteCountingSink& held = *counting;
  Relay relay(o, std::move(counting));
  ASSERT_TRUE(relay.run_until_idle(120s));
  EXPECT_EQ(unpublished(), 0);
  EXPECT_EQ(relay.stats().published, 18U);
  EXPECT_GT(relay.stats().successors, 0U) << "the second events should ride on the marks";
  EXPECT_EQ(relay.stats().in_flight_bytes, 0U);
  EXPECT_GT(held.largest(), 15 * kMiB);
  // Anything beside the large row while it was held would have taken the peak past its size.
  EXPECT_LE(held.peak(), std::max<std::uint64_t>(10 * kMiB, held.largest()))
      << "the relay held " << held.peak() << " bytes at once; budget " << 10 * kMiB
      << ", largest row " << held.largest();
  EXPECT_GT(held.peak(), 8 * kMiB) << "two 4 MiB rows fit the budget together";
}

}  // namespace
}  // namespace outbox::testing
