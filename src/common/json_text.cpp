#include "common/json_text.hpp"

#include <nlohmann/json.hpp>

namespace outbox::detail {

bool is_json(std::string_view text) { return nlohmann::json::accept(text); }

namespace {
bool has_nul(const nlohmann::json& value) {
  if (value.is_string()) return value.get_ref<const std::string&>().find('\0') != std::string::npos;
  if (value.is_object()) {
    for (const auto& [key, member] : value.items()) {
      if (key.find('\0') != std::string::npos || has_nul(member)) return true;
    }
  }
  if (value.is_array()) {
    for (const auto& element : value) {
      if (has_nul(element)) return true;
    }
  }
  return false;
}
}  // namespace

std::string check_jsonb_document(std::string_view text) {
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return "is not valid JSON";
  // Only a parse can tell an escaped NUL from the text "\\u0000" (a backslash, then u0000).
  if (text.find("u0000") != std::string_view::npos && has_nul(parsed)) {
    return "contains \\u0000, which PostgreSQL jsonb cannot store";
  }
  return {};
}

std::string check_header_object(std::string_view text) {
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return "is not valid JSON";
  if (!parsed.is_object()) return "must be a JSON object";
  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_string()) return "value of \"" + key + "\" must be a string";
    if (key.empty()) return "has an empty key";
  }
  if (has_nul(parsed)) return "contains \\u0000, which PostgreSQL jsonb cannot store";
  return {};
}

void append_array_element(std::string& literal, std::string_view value) {
  literal.push_back('"');
  for (const char c : value) {
    if (c == '"' || c == '\\') literal.push_back('\\');
    literal.push_back(c);
  }
  literal.push_back('"');
}

std::string to_array_literal(const std::vector<std::string>& values) {
  std::string literal = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) literal.push_back(',');
    append_array_element(literal, values[i]);
  }
  literal.push_back('}');
  return literal;
}

}  // namespace outbox::detail
