#pragma once
// Human byte sizes for flags and configuration: "64MiB", "512KiB", "1GiB", "1048576" (bytes).

#include <cstdint>
#include <string_view>

namespace outbox {

// A whole number of bytes, or of KiB, MiB or GiB (powers of 1024; the unit's case does not
// matter). Throws InvalidArgument saying what is wrong (empty, negative, a fraction, an unknown
// or ambiguous unit such as MB, too large).
std::uint64_t parse_byte_size(std::string_view text);

}  // namespace outbox
