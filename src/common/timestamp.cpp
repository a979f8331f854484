#include "common/timestamp.hpp"

#include <cstdint>

namespace outbox::detail {

namespace {

// Reads exactly `digits` decimal digits at `pos`, advancing it.
bool read_number(std::string_view text, std::size_t& pos, int digits, int& out) {
  if (pos + static_cast<std::size_t>(digits) > text.size()) return false;
  int value = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = text[pos + static_cast<std::size_t>(i)];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  pos += static_cast<std::size_t>(digits);
  out = value;
  return true;
}

bool expect(std::string_view text, std::size_t& pos, char c) {
  if (pos >= text.size() || text[pos] != c) return false;
  ++pos;
  return true;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_timestamptz(std::string_view text) {
  std::size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!read_number(text, pos, 4, year) || !expect(text, pos, '-') ||
      !read_number(text, pos, 2, month) || !expect(text, pos, '-') ||
      !read_number(text, pos, 2, day)) {
    return std::nullopt;
  }
  if (pos >= text.size() || (text[pos] != ' ' && text[pos] != 'T')) return std::nullopt;
  ++pos;
  if (!read_number(text, pos, 2, hour) || !expect(text, pos, ':') ||
      !read_number(text, pos, 2, minute) || !expect(text, pos, ':') ||
      !read_number(text, pos, 2, second)) {
    return std::nullopt;
  }
  std::int64_t micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 6) micros = micros * 10 + (text[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return std::nullopt;
    for (int i = digits; i < 6; ++i) micros *= 10;
  }
  // The offset: +HH, +HH:MM or +HH:MM:SS (or Z).
  int offset_seconds = 0;
  if (pos < text.size() && text[pos] == 'Z') {
    ++pos;
  } else {
    if (pos >= text.size() || (text[pos] != '+' && text[pos] != '-')) return std::nullopt;
    const int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh = 0, om = 0, os = 0;
    if (!read_number(text, pos, 2, oh)) return std::nullopt;
    if (pos < text.size() && text[pos] == ':') {
      ++pos;
      if (!read_number(text, pos, 2, om)) return std::nullopt;
      if (pos < text.size() && text[pos] == ':') {
        ++pos;
        if (!read_number(text, pos, 2, os)) return std::nullopt;
      }
    }
    offset_seconds = sign * (oh * 3600 + om * 60 + os);
  }
  if (pos != text.size()) return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(year),
                                         std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok()) return std::nullopt;
  const auto time = std::chrono::sys_days(date) + std::chrono::hours(hour) +
                    std::chrono::minutes(minute) + std::chrono::seconds(second) +
                    std::chrono::microseconds(micros) - std::chrono::seconds(offset_seconds);
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(time);
}

}  // namespace outbox::detail
