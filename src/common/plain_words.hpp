#pragma once
// Scanning text eight bytes at a time for the bytes that need a closer look (the classic
// word-at-a-time tests, "Bit Twiddling Hacks": a zero byte, a byte below n). Used where most of
// the text is plain (common/jsonb_scan.cpp: JSON payloads checked by the producer and the relay).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace outbox::detail {

namespace plain_words {
inline constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
inline constexpr std::uint64_t kHighs = 0x8080808080808080ULL;
// Non-zero exactly when a byte of `word` is zero.
constexpr std::uint64_t has_zero(std::uint64_t word) { return (word - kOnes) & ~word & kHighs; }
// Non-zero exactly when a byte of `word` is below `n` (n at most 0x80).
constexpr std::uint64_t has_below(std::uint64_t word, std::uint8_t n) {
  return (word - kOnes * n) & ~word & kHighs;
}
inline std::uint64_t word_at(std::string_view text, std::size_t pos) {
  std::uint64_t word = 0;
  std::memcpy(&word, text.data() + pos, sizeof(word));
  return word;
}
}  // namespace plain_words

// Past the whole 8-byte words from `pos` that hold ASCII only and no NUL: the first position
// whose word needs a byte-by-byte look (or the start of the tail shorter than a word).
inline std::size_t skip_ascii_words(std::string_view text, std::size_t pos) {
  using namespace plain_words;
  for (; pos + 8 <= text.size(); pos += 8) {
    const std::uint64_t word = word_at(text, pos);
    if (((word & kHighs) | has_zero(word)) != 0) break;
  }
  return pos;
}

// Past the whole 8-byte words from `pos` that hold no '"', '\\' or byte below 0x20: the bytes of
// a JSON string that stand for themselves.
inline std::size_t skip_json_string_words(std::string_view text, std::size_t pos) {
  using namespace plain_words;
  for (; pos + 8 <= text.size(); pos += 8) {
    const std::uint64_t word = word_at(text, pos);
    if ((has_below(word, 0x20) | has_zero(word ^ (kOnes * '"')) |
         has_zero(word ^ (kOnes * '\\'))) != 0) {
      break;
    }
  }
  return pos;
}

}  // namespace outbox::detail
