#pragma once
// Values that come from outside (callers, other writers of the tables, brokers) shown safely in a
// terminal or a log line. A terminal acts on some characters instead of showing them: ESC
// sequences clear the screen or move the cursor, a newline forges a log line, a right-to-left
// override shows "gpj.exe" as "exe.jpg". outbox refuses them in the names it writes (the
// producer), and escapes them wherever it prints what it read, since any writer can insert rows.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/text.hpp"

namespace outbox::detail {

struct HostileCharacter {
  std::size_t offset = 0;  // byte offset in the text
  std::string what;        // "the control character U+001B", "a byte that is not UTF-8 (0xff)"
};

// The first character a terminal or log viewer would act on instead of showing: C0 controls
// (U+0000..U+001F, tab and newline included), DEL, C1 controls (U+0080..U+009F), the
// bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069), the line and
// paragraph separators (U+2028, U+2029); or a byte that is not part of well-formed UTF-8.
std::optional<HostileCharacter> find_hostile_character(std::string_view text);

// printable(): outbox/text.hpp.
using outbox::printable;

}  // namespace outbox::detail
