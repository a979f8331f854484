#include <cctype>

#include "outbox/error.hpp"
#include "outbox/schema.hpp"

namespace outbox {
namespace {
constexpr std::size_t kMaxSchemaNameBytes = 48;

// The name as it can be shown in a message: control and non-ASCII bytes as \xNN.
std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : text.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F || c == '\\') {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0x0F];
    } else {
      out += c;
    }
  }
  return out;
}

std::string validate(std::string_view name) {
  auto fail = [&](const std::string& rule) -> std::string {
    throw InvalidArgument(
        "invalid schema name \"" + printable(name) + "\": " + rule +
        ". Use lower-case letters, digits and '_', starting with a letter or '_', "
        "e.g. --schema outbox");
  };
  if (name.empty()) fail("it is empty");
  if (name.size() > kMaxSchemaNameBytes) fail("it is longer than 48 bytes");
  if (!(std::islower(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    fail("it must start with a lower-case letter or '_'");
  }
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::islower(u) || std::isdigit(u) || c == '_') || u >= 0x80) {
      fail("it contains the character '" + printable(std::string_view(&c, 1)) + "'");
    }
  }
  // PostgreSQL's own schemas: pg_catalog, pg_toast, pg_temp_N, pg_toast_temp_N and any future
  // pg_ name (CREATE SCHEMA refuses them), and information_schema (the SQL standard's views,
  // created by initdb: outbox's tables would sit among the catalog's).
  if (name.starts_with("pg_")) {
    fail("names starting with pg_ are reserved by PostgreSQL (pg_catalog, pg_toast, pg_temp...)");
  }
  if (name == "information_schema") {
    fail("information_schema is PostgreSQL's own schema of catalog views; choose one of your own");
  }
  return std::string(name);
}
}  // namespace

SchemaName::SchemaName() : SchemaName("outbox") {}

SchemaName::SchemaName(std::string_view name) : name_(validate(name)), quoted_('"' + name_ + '"') {}

std::string SchemaName::table(std::string_view table) const {
  return quoted_ + ".\"" + std::string(table) + '"';
}

std::string SchemaName::notify_channel() const { return name_ + "_outbox_events"; }

std::string SchemaName::message_prefix() const { return "outbox:" + name_; }
std::string SchemaName::replay_message_prefix() const { return "outbox-replay:" + name_; }

}  // namespace outbox
