#pragma once
// The operator audit (outbox_operator_audit) is read by people and tools: an actor or reason that
// could forge a line or hide text (a newline, an escape sequence, a right-to-left override, bytes
// that are not UTF-8) is refused rather than stored. Shared by quarantine and replay.

#include <fmt/format.h>

#include <string_view>

#include "common/printable.hpp"
#include "outbox/error.hpp"

namespace outbox::detail {

// Throws InvalidArgument naming the command (`action`), the field and the character.
inline void check_audit_text(std::string_view action, std::string_view what,
                             std::string_view text) {
  if (const auto hostile = find_hostile_character(text)) {
    throw InvalidArgument(fmt::format(
        "{}: the {} holds {} at byte {}; the audit record takes one line of printable text", action,
        what, hostile->what, hostile->offset));
  }
}

}  // namespace outbox::detail
