#pragma once
// PostgreSQL array literals ({"a","b"}) for batched statements: one parameter, one round trip for
// a whole batch. Every caller that passes a text[], uuid[] or jsonb[] parameter builds it here.

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/event.hpp"

namespace outbox::pg {

// Appends `value` as one element of an array literal: double-quoted, with \ before " and \.
// Quoted, an element is never NULL nor split at commas, braces or spaces.
void append_array_element(std::string& literal, std::string_view value);

// The bytes append_array_element adds for `value`.
std::size_t array_element_bytes(std::string_view value);

// Builds an array literal element by element: add() quotes (text, JSON), add_plain() does not
// (uuids, numbers, booleans: text that needs no quoting), add_null() adds NULL. text() closes it;
// nothing may be added after.
class ArrayLiteral {
 public:
  void add(std::string_view value) {
    separate();
    append_array_element(text_, value);
  }
  void add(const EventId& id) { add_plain(id.to_string()); }
  void add_plain(std::string_view value) {
    separate();
    text_ += value;
  }
  // An SQL NULL element.
  void add_null() { add_plain("NULL"); }
  [[nodiscard]] const std::string& text() {
    if (!closed_) text_ += '}';
    closed_ = true;
    return text_;
  }

 private:
  void separate() {
    if (closed_) throw std::logic_error("ArrayLiteral: add after text()");
    if (elements_++ > 0) text_ += ',';
  }
  std::string text_ = "{";
  std::size_t elements_ = 0;
  bool closed_ = false;
};

// {"a","b"} for a text[] or jsonb[] parameter.
std::string text_array(const std::vector<std::string>& values);

// {id,id} for a uuid[] parameter.
std::string uuid_array(std::span<const EventId> ids);

}  // namespace outbox::pg
