#pragma once
// Reading the big-endian fields of the replication protocol's messages (pgoutput.hpp), shared by
// the CopyData decoding (copy_data.cpp) and the pgoutput decoding (pgoutput.cpp). No I/O.

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "cdc/pgoutput.hpp"

namespace outbox::cdc {

// A byte as an error message shows it: 'B' (0x42), or 0x00 when it is not printable ASCII.
inline std::string describe_byte(unsigned char byte) {
  if (byte >= 0x20 && byte < 0x7f)
    return fmt::format("'{}' (0x{:02x})", static_cast<char>(byte), byte);
  return fmt::format("0x{:02x}", byte);
}

// Reads big-endian fields from a buffer and never past its end. The first failure is kept and
// every later read is a no-op returning false, so a decoder reads its fields one after the other
// and checks once (ok(), finish()).
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view what, std::size_t start)
      : bytes_(bytes), what_(what), offset_(start) {}

  [[nodiscard]] bool ok() const noexcept { return !failed_; }
  [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - offset_; }
  [[nodiscard]] DecodeError error() const { return error_; }
  // Errors name the column being read, if any (-1: none).
  void at_column(long column) noexcept { column_ = column; }

  bool u8(std::uint8_t& value, std::string_view field) { return unsigned_int(value, field); }
  bool u16(std::uint16_t& value, std::string_view field) { return unsigned_int(value, field); }
  bool u32(std::uint32_t& value, std::string_view field) { return unsigned_int(value, field); }
  bool u64(std::uint64_t& value, std::string_view field) { return unsigned_int(value, field); }
  bool i32(std::int32_t& value, std::string_view field) {
    std::uint32_t raw = 0;
    if (!unsigned_int(raw, field)) return false;
    value = static_cast<std::int32_t>(raw);  // two's complement, as PostgreSQL wrote it
    return true;
  }
  bool i64(std::int64_t& value, std::string_view field) {
    std::uint64_t raw = 0;
    if (!unsigned_int(raw, field)) return false;
    value = static_cast<std::int64_t>(raw);
    return true;
  }

  // `count` bytes as a view into the buffer.
  bool bytes(std::size_t count, std::string_view& value, std::string_view field) {
    if (!need(count, field)) return false;
    value = bytes_.substr(offset_, count);
    offset_ += count;
    return true;
  }

  // A NUL-terminated string; the view excludes the NUL.
  bool cstring(std::string_view& value, std::string_view field) {
    if (failed_) return false;
    const void* nul = std::memchr(bytes_.data() + offset_, '\0', remaining());
    if (nul == nullptr) {
      return fail(fmt::format("{} has no terminating NUL ({} bytes left)", field, remaining()));
    }
    const auto length =
        static_cast<std::size_t>(static_cast<const char*>(nul) - bytes_.data()) - offset_;
    value = bytes_.substr(offset_, length);
    offset_ += length + 1;
    return true;
  }

  // Refuses a declared count of items that cannot fit in the bytes left, before anything is
  // reserved for them: a hostile count costs nothing.
  bool count_fits(std::uint64_t count, std::size_t min_bytes_each, std::string_view items) {
    if (failed_ || count <= remaining() / min_bytes_each) return !failed_;
    return fail(fmt::format("{} {} declared but only {} bytes left (each takes at least {})", count,
                            items, remaining(), min_bytes_each));
  }

  // Records an error at the current offset; returns false.
  bool fail(std::string_view detail) {
    if (failed_) return false;
    failed_ = true;
    const std::string column = column_ >= 0 ? fmt::format(" (column {})", column_) : "";
    error_ =
        DecodeError{fmt::format("{}: {}{} at byte {}", what_, detail, column, offset_), offset_};
    return false;
  }

  // True when everything was read without error and nothing is left over.
  bool finish() {
    if (failed_) return false;
    if (remaining() == 0) return true;
    return fail(fmt::format("{} unexpected bytes after the end of the message", remaining()));
  }

 private:
  bool need(std::size_t count, std::string_view field) {
    if (failed_) return false;
    if (count <= remaining()) return true;
    return fail(
        fmt::format("truncated reading {} ({} bytes needed, {} left)", field, count, remaining()));
  }

  template <typename Unsigned>
  bool unsigned_int(Unsigned& value, std::string_view field) {
    if (!need(sizeof(Unsigned), field)) return false;
    std::uint64_t result = 0;
    for (std::size_t i = 0; i < sizeof(Unsigned); ++i) {
      result = (result << 8U) | static_cast<unsigned char>(bytes_[offset_ + i]);
    }
    offset_ += sizeof(Unsigned);
    value = static_cast<Unsigned>(result);
    return true;
  }

  std::string_view bytes_;
  std::string_view what_;
  std::size_t offset_;
  long column_ = -1;
  bool failed_ = false;
  DecodeError error_;
};

}  // namespace outbox::cdc
