#pragma once
// ASCII lower case, for names compared case-insensitively (HTTP and Kafka header names, byte-size
// units, connection-string keys). Other bytes, UTF-8 included, are kept as they are.

#include <algorithm>
#include <string>
#include <string_view>

namespace outbox::detail {

inline std::string ascii_lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return out;
}

}  // namespace outbox::detail
