#pragma once
// Secrets never reach a log line, an error message or a stats line. Connection strings carry
// passwords (postgresql://app:SECRET@host/db, password=SECRET), and libpq's own error messages
// may quote parts of a string it could not parse; Kafka properties carry SASL and TLS secrets.
// Everything outbox prints about a connection goes through these.

#include "outbox/text.hpp"

namespace outbox::detail {

// The functions are outbox/text.hpp's.
using outbox::connection_secrets;
using outbox::is_secret_kafka_property;
using outbox::kRedacted;
using outbox::kShortestScrubbed;
using outbox::redact_connection_string;
using outbox::scrub;

// A broker URL (amqp://, redis://) for an error message: the password of its user information
// ("user:password@" -> "user:***@"; a bare "secret@", which some clients read as a password,
// -> "***@"). The last '@' of the URL ends it, as a password may hold '@' and '/' unencoded.
std::string redact_url_password(const std::string& url);

}  // namespace outbox::detail
