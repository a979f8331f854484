// numeric_text_bytes (jsonb_scan.hpp): how long numeric_out prints a JSON number, and whether
// PostgreSQL's numeric can hold it at all.

#include <algorithm>
#include <climits>
#include <optional>

#include "common/jsonb_scan.hpp"

namespace outbox::detail {
namespace {

// numeric's storage (src/backend/utils/adt/numeric.c): the weight of the first base-10000 digit
// is an int16, the display scale 14 bits; numeric_in refuses an exponent of INT_MAX/2 or more.
constexpr std::int64_t kNumericWeightMax = 32767;
constexpr std::int64_t kNumericWeightMin = -32768;
constexpr std::int64_t kNumericDscaleMax = 16383;
constexpr std::int64_t kNumericExponentLimit = INT_MAX / 2;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::int64_t floor_div4(std::int64_t value) { return value >= 0 ? value / 4 : -((-value + 3) / 4); }

}  // namespace

std::int64_t numeric_text_bytes(std::string_view number) {
  std::size_t i = 0;
  const bool negative = !number.empty() && number[0] == '-';
  if (negative) ++i;
  const std::size_t integer_start = i;
  while (i < number.size() && is_digit(number[i])) ++i;
  const std::size_t integer_digits = i - integer_start;
  std::size_t fraction_start = i, fraction_digits = 0;
  if (i < number.size() && number[i] == '.') {
    fraction_start = ++i;
    while (i < number.size() && is_digit(number[i])) ++i;
    fraction_digits = i - fraction_start;
  }
  std::int64_t exponent = 0;
  if (i < number.size() && (number[i] == 'e' || number[i] == 'E')) {
    ++i;
    bool exponent_negative = false;
    if (i < number.size() && (number[i] == '+' || number[i] == '-')) {
      exponent_negative = number[i++] == '-';
    }
    for (; i < number.size() && is_digit(number[i]); ++i) {
      exponent = std::min<std::int64_t>(exponent * 10 + (number[i] - '0'), 1LL << 40);
    }
    if (exponent_negative) exponent = -exponent;
  }
  if (exponent >= kNumericExponentLimit || exponent <= -kNumericExponentLimit) return -1;
  const std::int64_t scale =
      std::max<std::int64_t>(0, static_cast<std::int64_t>(fraction_digits) - exponent);
  if (scale > kNumericDscaleMax) return -1;
  const std::int64_t fraction_part = scale > 0 ? 1 + scale : 0;  // ".000"

  // The place value (a power of ten) of the first non-zero digit.
  std::optional<std::int64_t> place;
  for (std::size_t d = 0; d < integer_digits && !place; ++d) {
    if (number[integer_start + d] != '0') {
      place = static_cast<std::int64_t>(integer_digits - 1 - d) + exponent;
    }
  }
  for (std::size_t d = 0; d < fraction_digits && !place; ++d) {
    if (number[fraction_start + d] != '0') place = -static_cast<std::int64_t>(d + 1) + exponent;
  }
  if (!place) return 1 + fraction_part;  // zero: "0", never "-0"
  const std::int64_t weight = floor_div4(*place);
  if (weight > kNumericWeightMax || weight < kNumericWeightMin) return -1;
  const std::int64_t integer_part = *place >= 0 ? *place + 1 : 1;  // "0.5"
  return (negative ? 1 : 0) + integer_part + fraction_part;
}

}  // namespace outbox::detail
