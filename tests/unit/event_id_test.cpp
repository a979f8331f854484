// EventId: UUIDv7 generation (RFC 9562), ordering, and the canonical text form.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "outbox/event.hpp"

namespace outbox {
namespace {

std::uint64_t unix_millis_now() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t timestamp_millis(const EventId& id) {
  std::uint64_t ms = 0;
  for (int i = 0; i < 6; ++i) ms = (ms << 8) | id.bytes()[static_cast<std::size_t>(i)];
  return ms;
}

constexpr const char* kSample = "0189f7a2-3c4d-7e5f-8a6b-7c8d9e0f1a2b";

// --- generate() ---

TEST(EventIdGenerate, TimestampPrefixIsTheCurrentUnixTimeInMilliseconds) {
  // Earlier bursts in this process may have run the per-millisecond counter out and pushed the
  // generator's clock ahead of the wall clock (allowed by RFC 9562); let the wall clock catch up.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::uint64_t before = unix_millis_now();
  const EventId id = EventId::generate();
  const std::uint64_t after = unix_millis_now();

  constexpr std::uint64_t kSlackMs = 5;
  EXPECT_GE(timestamp_millis(id) + kSlackMs, before);
  EXPECT_LE(timestamp_millis(id), after + kSlackMs);
}

TEST(EventIdGenerate, HasVersion7AndTheRfc9562Variant) {
  for (int i = 0; i < 1000; ++i) {
    const EventId id = EventId::generate();
    ASSERT_EQ(id.version(), 7) << id.to_string();
    ASSERT_EQ(id.bytes()[6] >> 4, 0x7) << id.to_string();
    ASSERT_EQ(id.bytes()[8] >> 6, 0b10) << id.to_string();
    // The same fields as they appear in the text: 14th hex digit '7', 19th one of 8 9 a b.
    const std::string text = id.to_string();
    ASSERT_EQ(text[14], '7') << text;
    ASSERT_NE(std::string("89ab").find(text[19]), std::string::npos) << text;
  }
}

TEST(EventIdGenerate, IsNeverNil) { EXPECT_FALSE(EventId::generate().is_nil()); }

TEST(EventIdGenerate, IdsFromOneThreadStrictlyIncrease) {
  constexpr int kCount = 100000;
  EventId previous = EventId::generate();
  for (int i = 0; i < kCount; ++i) {
    const EventId next = EventId::generate();
    ASSERT_LT(previous, next) << "id " << i << ": " << previous.to_string() << " then "
                              << next.to_string();
    // operator< must agree with the unsigned byte order PostgreSQL uses for uuid.
    ASSERT_TRUE(std::lexicographical_compare(previous.bytes().begin(), previous.bytes().end(),
                                             next.bytes().begin(), next.bytes().end()));
    // And with the text order, which tools and logs sort by.
    ASSERT_LT(previous.to_string(), next.to_string());
    previous = next;
  }
}

TEST(EventIdGenerate, IdsFromSeveralThreadsAreUniqueAndIncreasePerThread) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::vector<EventId>> per_thread(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ids = per_thread[static_cast<std::size_t>(t)]] {
      ids.reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) ids.push_back(EventId::generate());
    });
  }
  for (auto& thread : threads) thread.join();

  std::vector<EventId> all;
  for (const auto& ids : per_thread) {
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
    all.insert(all.end(), ids.begin(), ids.end());
  }
  std::sort(all.begin(), all.end());
  const auto duplicate = std::adjacent_find(all.begin(), all.end());
  EXPECT_EQ(duplicate, all.end()) << "duplicate id " << duplicate->to_string();
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
}

// --- to_string() ---

TEST(EventIdToString, IsLowerCase8_4_4_4_12) {
  std::array<std::uint8_t, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(0xA0 + i);
  EXPECT_EQ(EventId(bytes).to_string(), "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
}

TEST(EventIdToString, NilIsAllZeros) {
  EXPECT_EQ(EventId().to_string(), "00000000-0000-0000-0000-000000000000");
}

TEST(EventIdToString, GeneratedIdsHaveTheCanonicalShape) {
  const std::string text = EventId::generate().to_string();
  ASSERT_EQ(text.size(), 36U);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      EXPECT_EQ(text[i], '-') << text;
    } else {
      EXPECT_NE(std::string("0123456789abcdef").find(text[i]), std::string::npos) << text;
    }
  }
}

// --- parse() ---

TEST(EventIdParse, RoundTripsGeneratedIds) {
  for (int i = 0; i < 1000; ++i) {
    const EventId id = EventId::generate();
    const auto parsed = EventId::parse(id.to_string());
    ASSERT_TRUE(parsed.has_value()) << id.to_string();
    EXPECT_EQ(*parsed, id);
  }
}

TEST(EventIdParse, ReadsTheBytesInOrder) {
  const auto parsed = EventId::parse(kSample);
  ASSERT_TRUE(parsed.has_value());
  const std::array<std::uint8_t, 16> expected{0x01, 0x89, 0xf7, 0xa2, 0x3c, 0x4d, 0x7e, 0x5f,
                                              0x8a, 0x6b, 0x7c, 0x8d, 0x9e, 0x0f, 0x1a, 0x2b};
  EXPECT_EQ(parsed->bytes(), expected);
  EXPECT_EQ(parsed->version(), 7);
  EXPECT_EQ(parsed->to_string(), kSample);
}

TEST(EventIdParse, AcceptsUpperAndMixedCase) {
  const auto upper = EventId::parse("0189F7A2-3C4D-7E5F-8A6B-7C8D9E0F1A2B");
  const auto mixed = EventId::parse("0189f7A2-3c4D-7E5f-8a6B-7c8D9e0F1a2B");
  ASSERT_TRUE(upper.has_value());
  ASSERT_TRUE(mixed.has_value());
  EXPECT_EQ(upper->to_string(), kSample);
  EXPECT_EQ(mixed->to_string(), kSample);
}

TEST(EventIdParse, RejectsTheEmptyString) { EXPECT_FALSE(EventId::parse("").has_value()); }

TEST(EventIdParse, RejectsWrongLength) {
  const std::string sample = kSample;
  EXPECT_FALSE(EventId::parse(sample.substr(0, 35)).has_value());
  EXPECT_FALSE(EventId::parse(sample + "0").has_value());
  EXPECT_FALSE(EventId::parse(" " + sample).has_value());
  EXPECT_FALSE(EventId::parse(sample + "\n").has_value());
  // The 32-digit form without dashes and the braced form are not canonical.
  EXPECT_FALSE(EventId::parse("0189f7a23c4d7e5f8a6b7c8d9e0f1a2b").has_value());
  EXPECT_FALSE(EventId::parse("{" + sample + "}").has_value());
}

TEST(EventIdParse, RejectsMissingDashes) {
  for (const std::size_t dash : {8U, 13U, 18U, 23U}) {
    std::string text = kSample;
    text[dash] = '0';  // same length, one dash replaced by a hex digit
    EXPECT_FALSE(EventId::parse(text).has_value()) << text;
  }
}

TEST(EventIdParse, RejectsMisplacedDashes) {
  // 36 characters with four dashes, but a group boundary moved by one.
  EXPECT_FALSE(EventId::parse("0189f7a-23c4d-7e5f-8a6b-7c8d9e0f1a2b").has_value());
  EXPECT_FALSE(EventId::parse("0189f7a23-c4d-7e5f-8a6b-7c8d9e0f1a2b").has_value());
  EXPECT_FALSE(EventId::parse("0189f7a2-3c4d7-e5f-8a6b-7c8d9e0f1a2b").has_value());
  EXPECT_FALSE(EventId::parse("0189f7a2-3c4d-7e5f-8a6b7-c8d9e0f1a2b").has_value());
  EXPECT_FALSE(EventId::parse("0189f7a2-3c4d-7e5f-8a6b-7c8d9e0f1a2-").has_value());
}

TEST(EventIdParse, RejectsNonHexCharacters) {
  const std::string sample = kSample;
  for (const char bad : {'g', 'G', 'z', ' ', '-', '+', ':', 'x', '\0'}) {
    for (const std::size_t at : {0U, 1U, 9U, 20U, 35U}) {
      std::string text = sample;
      text[at] = bad;
      EXPECT_FALSE(EventId::parse(text).has_value()) << "'" << bad << "' at " << at;
    }
  }
  std::string non_ascii = sample;
  non_ascii[5] = static_cast<char>(0xC3);
  EXPECT_FALSE(EventId::parse(non_ascii).has_value());
}

// --- is_nil() ---

TEST(EventIdIsNil, DefaultConstructedIsNil) { EXPECT_TRUE(EventId().is_nil()); }

TEST(EventIdIsNil, ParsedNilIsNil) {
  const auto nil = EventId::parse("00000000-0000-0000-0000-000000000000");
  ASSERT_TRUE(nil.has_value());
  EXPECT_TRUE(nil->is_nil());
  EXPECT_EQ(*nil, EventId());
}

TEST(EventIdIsNil, AnyNonZeroByteIsNotNil) {
  for (std::size_t i = 0; i < 16; ++i) {
    std::array<std::uint8_t, 16> bytes{};
    bytes[i] = 1;
    EXPECT_FALSE(EventId(bytes).is_nil()) << "byte " << i;
  }
}

}  // namespace
}  // namespace outbox
