#pragma once
// An assertion that names both strings when a message lacks the expected part.

#include <gtest/gtest.h>

#include <string>

namespace outbox {

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

}  // namespace outbox
