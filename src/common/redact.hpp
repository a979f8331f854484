#pragma once
// Secrets never reach a log line, an error message or a stats line. Connection strings carry
// passwords (postgresql://app:SECRET@host/db, password=SECRET), and libpq's own error messages
// may quote parts of a string it could not parse; Kafka properties carry SASL and TLS secrets.
// Everything outbox prints about a connection goes through these.

#include <string>
#include <string_view>
#include <vector>

namespace outbox::detail {

inline constexpr std::string_view kRedacted = "********";

// The secrets a libpq connection string (URI or keyword/value form) holds: the URI's password,
// and the values of password= and sslpassword= (also percent-decoded, as libpq would read them).
// Works on strings libpq would refuse too: it only looks for the places a secret stands.
std::vector<std::string> connection_secrets(std::string_view conninfo);

// `conninfo` with every secret replaced by kRedacted; fit to print.
std::string redact_connection_string(std::string_view conninfo);

// `text` with every occurrence of each secret replaced by kRedacted. Secrets shorter than
// kShortestScrubbed are left alone: replacing every "a" would make the message unreadable, and
// such a password protects nothing (connection strings are still redacted by position).
inline constexpr std::size_t kShortestScrubbed = 4;
std::string scrub(std::string text, const std::vector<std::string>& secrets);

// True for a librdkafka property whose value is a secret or may hold one (passwords, keys, SASL
// and OAuth settings, JAAS configs): its value is never printed.
bool is_secret_kafka_property(std::string_view key);

}  // namespace outbox::detail
