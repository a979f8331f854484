// parse_byte_size: the forms flags accept, and the errors for the ones they refuse.

#include "outbox/byte_size.hpp"

#include <gtest/gtest.h>

#include "contains.hpp"
#include "outbox/error.hpp"

namespace outbox {
namespace {

TEST(ByteSize, ReadsBytesAndPowersOf1024) {
  EXPECT_EQ(parse_byte_size("0"), 0U);
  EXPECT_EQ(parse_byte_size("1048576"), 1048576U);
  EXPECT_EQ(parse_byte_size("100B"), 100U);
  EXPECT_EQ(parse_byte_size("512KiB"), 512U * 1024);
  EXPECT_EQ(parse_byte_size("64MiB"), 64U << 20);
  EXPECT_EQ(parse_byte_size("64mib"), 64U << 20);
  EXPECT_EQ(parse_byte_size("2GiB"), std::uint64_t{2} << 30);
}

std::string error_of(std::string_view text) {
  try {
    parse_byte_size(text);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ByteSize, RefusesWhatIsNotASizeAndSaysWhy) {
  EXPECT_TRUE(contains(error_of(""), "empty"));
  EXPECT_TRUE(contains(error_of("-1MiB"), "negative"));
  EXPECT_TRUE(contains(error_of("MiB"), "expected a number"));
  EXPECT_TRUE(contains(error_of("1.5MiB"), "whole numbers only"));
  EXPECT_TRUE(contains(error_of("64MB"), "\"MB\" is ambiguous"));
  EXPECT_TRUE(contains(error_of("64 MiB"), "unknown unit \" MiB\""));
  EXPECT_TRUE(contains(error_of("7x"), "e.g. 64MiB"));
  EXPECT_TRUE(contains(error_of("99999999999999999999"), "too large"));
  EXPECT_TRUE(contains(error_of("99999999999GiB"), "too large"));
}

}  // namespace
}  // namespace outbox
