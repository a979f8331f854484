// The parts of the replication client (replication_stream.hpp) that do no I/O: which failure a
// server error is, valid and quoted names and literals, LSN text, and when a standby status
// update is due. The stream itself is replication_stream.cpp.

#include <fmt/format.h>

#include <charconv>

#include "cdc/replication_stream.hpp"
#include "common/printable.hpp"

namespace outbox::cdc {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kMaxNameBytes = 63;  // NAMEDATALEN - 1

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}
bool has(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

std::string_view to_string(ReplicationFailure failure) noexcept {
  switch (failure) {
    case ReplicationFailure::other:
      return "other";
    case ReplicationFailure::unavailable:
      return "unavailable";
    case ReplicationFailure::not_permitted:
      return "not_permitted";
    case ReplicationFailure::slot_missing:
      return "slot_missing";
    case ReplicationFailure::slot_exists:
      return "slot_exists";
    case ReplicationFailure::slot_in_use:
      return "slot_in_use";
    case ReplicationFailure::slot_invalidated:
      return "slot_invalidated";
    case ReplicationFailure::publication_missing:
      return "publication_missing";
    case ReplicationFailure::protocol:
      return "protocol";
  }
  return "unknown";
}

// The SQLSTATEs are PostgreSQL 15's (measured by ReplicationStreamTest). 42704 (undefined object)
// is sent both for a missing slot (`replication slot "s" does not exist`, from START_REPLICATION or
// DROP_REPLICATION_SLOT) and for a missing publication (`publication "p" does not exist`, from
// pgoutput while streaming): only the message tells them apart. So does it for 55000 (object not
// in prerequisite state), which also says "was not created in this database" and more.
ReplicationFailure classify_replication_error(std::string_view sqlstate, std::string_view primary,
                                              std::string_view detail) {
  using F = ReplicationFailure;
  if (starts_with(sqlstate, "08") || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03") {
    return F::unavailable;  // connection failure, administrator command, crash, starting up
  }
  if (sqlstate == "42501") return F::not_permitted;
  const bool about_slot = has(primary, "replication slot");
  if (sqlstate == "42704") {
    if (starts_with(primary, "publication")) return F::publication_missing;
    if (about_slot) return F::slot_missing;
  }
  if (sqlstate == "42710" && about_slot) return F::slot_exists;
  if (sqlstate == "55006" && about_slot) return F::slot_in_use;
  if (sqlstate == "55000" && (has(detail, "invalidated") || has(primary, "invalidated") ||
                              has(primary, "can no longer get changes"))) {
    return F::slot_invalidated;
  }
  if (sqlstate == "58P01" && has(primary, "has already been removed")) return F::slot_invalidated;
  return F::other;
}

std::string quoted_literal(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

void validate_slot_name(std::string_view name) {
  auto fail = [&](const std::string& why) {
    throw InvalidArgument("invalid replication slot name \"" + detail::printable(name, 80) +
                          "\": " + why +
                          ". PostgreSQL allows 1 to 63 lower-case letters, digits and '_'");
  };
  if (name.empty()) fail("it is empty");
  if (name.size() > kMaxNameBytes) fail(fmt::format("it is {} bytes long", name.size()));
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      fail(fmt::format("byte {} (0x{:02x}) is not allowed", i, static_cast<unsigned char>(c)));
    }
  }
}

void validate_publication_name(std::string_view name) {
  auto fail = [&](const std::string& why) {
    throw InvalidArgument("invalid publication name \"" + detail::printable(name, 80) +
                          "\": " + why);
  };
  if (name.empty()) fail("it is empty");
  if (name.size() > kMaxNameBytes) {
    fail(fmt::format("it is {} bytes long; PostgreSQL names have at most 63", name.size()));
  }
  if (const auto hostile = detail::find_hostile_character(name)) {
    fail(fmt::format("{} at byte {}", hostile->what, hostile->offset));
  }
}

std::string publication_names_literal(std::string_view publication) {
  std::string identifier = "\"";
  for (const char c : publication) {
    identifier += c;
    if (c == '"') identifier += '"';
  }
  identifier += '"';
  return quoted_literal(identifier);
}

std::string publication_names_literal(const std::vector<std::string>& publications) {
  std::string identifiers;
  for (const std::string& publication : publications) {
    if (!identifiers.empty()) identifiers += ',';
    identifiers += '"';
    for (const char c : publication) {
      identifiers += c;
      if (c == '"') identifiers += '"';
    }
    identifiers += '"';
  }
  return quoted_literal(identifiers);
}

std::optional<Lsn> parse_lsn(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash > 8 || text.size() - slash - 1 == 0 ||
      text.size() - slash - 1 > 8) {
    return std::nullopt;
  }
  auto half = [](std::string_view digits) -> std::optional<std::uint32_t> {
    std::uint32_t value = 0;
    const auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
    if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return value;
  };
  const auto high = half(text.substr(0, slash));
  const auto low = half(text.substr(slash + 1));
  if (!high || !low) return std::nullopt;
  return (static_cast<Lsn>(*high) << 32U) | *low;
}

// ---- StatusSchedule ----

StatusSchedule::StatusSchedule(milliseconds interval, Clock::time_point now)
    : interval_(interval), last_sent_(now) {
  if (interval.count() <= 0) {
    throw InvalidArgument(
        fmt::format("status interval must be positive, not {} ms", interval.count()));
  }
}

void StatusSchedule::sent(Clock::time_point now) noexcept {
  last_sent_ = now;
  reply_requested_ = false;
}

milliseconds StatusSchedule::until_due(Clock::time_point now) const noexcept {
  if (reply_requested_) return milliseconds(0);
  const auto left = last_sent_ + interval_ - now;
  if (left <= Clock::duration::zero()) return milliseconds(0);
  return std::chrono::ceil<milliseconds>(left);
}

}  // namespace outbox::cdc
