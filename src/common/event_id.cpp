#include <chrono>
#include <mutex>
#include <random>

#include "outbox/event.hpp"

namespace outbox {
namespace {

// UUIDv7 with "method 3" of RFC 9562 section 6.2: 12 bits of the rand_a field hold a counter that
// restarts at a random small value each millisecond, so ids of one process strictly increase even
// within a millisecond. When the counter runs out the timestamp is advanced by one millisecond.
struct V7State {
  std::mutex mutex;
  std::mt19937_64 random{std::random_device{}()};
  std::uint64_t last_ms = 0;
  std::uint32_t counter = 0;
};

V7State& state() {
  static V7State s;
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

EventId EventId::generate() {
  auto& s = state();
  std::uint64_t ms = 0;
  std::uint32_t counter = 0;
  std::uint64_t tail = 0;
  {
    std::lock_guard lock(s.mutex);
    const auto now =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    if (now > s.last_ms) {
      s.last_ms = now;
      s.counter = static_cast<std::uint32_t>(s.random() & 0x1FF);  // leave room to count up
    } else if (++s.counter > 0xFFF) {  // clock went back or 4096 ids this millisecond
      ++s.last_ms;
      s.counter = static_cast<std::uint32_t>(s.random() & 0x1FF);
    }
    ms = s.last_ms;
    counter = s.counter;
    tail = s.random();
  }
  std::array<std::uint8_t, 16> b{};
  for (int i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
  b[6] = static_cast<std::uint8_t>(0x70 | ((counter >> 8) & 0x0F));
  b[7] = static_cast<std::uint8_t>(counter & 0xFF);
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<std::uint8_t>(tail >> (56 - 8 * i));
  b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3F));  // RFC 9562 variant
  return EventId(b);
}

std::optional<EventId> EventId::parse(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  std::array<std::uint8_t, 16> b{};
  std::size_t out = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return std::nullopt;
      ++i;
      continue;
    }
    const int hi = hex_value(text[i]);
    const int lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    b[out++] = static_cast<std::uint8_t>(hi * 16 + lo);
    i += 2;
  }
  return EventId(b);
}

std::string EventId::to_string() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (std::size_t i = 0; i < bytes_.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(kHex[bytes_[i] >> 4]);
    s.push_back(kHex[bytes_[i] & 0x0F]);
  }
  return s;
}

}  // namespace outbox
