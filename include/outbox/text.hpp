#pragma once
// Text that comes from outside shown safely, and secrets kept out of what is printed: what the
// outbox programs use for every value they print, for callers that print the library's values
// too. Values from outside (callers, other writers of the tables, brokers) may hold characters a
// terminal acts on instead of showing them (ESC sequences, a newline that forges a log line, a
// right-to-left override); connection strings carry passwords, libpq's own error messages may
// quote parts of a string it could not parse, and Kafka properties carry SASL and TLS secrets.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

// `text` with each of those characters escaped (\x1b, \x7f, \u0085, \u202e, \xff for a stray
// byte) and each backslash doubled, so the output shows exactly what is stored and nothing else
// happens. Everything else, other UTF-8 included, is kept. At most `max_bytes` of the input are
// shown, then "...".
std::string printable(std::string_view text, std::size_t max_bytes = 4096);

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

}  // namespace outbox
