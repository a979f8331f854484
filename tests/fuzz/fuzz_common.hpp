#pragma once
// What every fuzz target checks about an error it gets: the message is safe to print (outbox
// quotes the input escaped, common/printable.hpp) and says something.

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "common/printable.hpp"

namespace outbox::fuzz {

[[noreturn]] inline void fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "property violated: %s\ninput (escaped): %s\n", what,
               detail::printable(input, 2000).c_str());
  std::abort();
}

inline void expect_printable_message(std::string_view message, std::string_view input) {
  if (message.empty()) fail("an empty error message", input);
  if (detail::find_hostile_character(message)) {
    fail("an error message with a character a terminal acts on", input);
  }
}

}  // namespace outbox::fuzz
