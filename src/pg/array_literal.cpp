#include "pg/array_literal.hpp"

namespace outbox::pg {

void append_array_element(std::string& literal, std::string_view value) {
  literal.push_back('"');
  for (const char c : value) {
    if (c == '"' || c == '\\') literal.push_back('\\');
    literal.push_back(c);
  }
  literal.push_back('"');
}

std::size_t array_element_bytes(std::string_view value) {
  std::size_t bytes = value.size() + 2;
  for (const char c : value) bytes += (c == '"' || c == '\\') ? 1 : 0;
  return bytes;
}

std::string text_array(const std::vector<std::string>& values) {
  ArrayLiteral literal;
  for (const std::string& value : values) literal.add(value);
  return literal.text();
}

std::string uuid_array(std::span<const EventId> ids) {
  ArrayLiteral literal;
  for (const EventId& id : ids) literal.add(id);
  return literal.text();
}

}  // namespace outbox::pg
