#pragma once
// An event as CloudEvents 1.0 attributes (https://cloudevents.io), one list for every sink that
// speaks it: the HTTP sink writes them as ce-<name> headers (percent-encoded, the HTTP binding),
// the Kafka sink as ce_<name> headers (UTF-8 as they are, the Kafka binding; partitionkey is the
// message key there). The extensions are outbox's own: lower-case letters, at most 20 (the
// spec's advice). CloudEvents' own "sequence" extension wants values that sort as strings, which
// "10" after "9" would not: aggregatesequence is the plain number.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/event.hpp"

namespace outbox::detail {

// specversion, id, source, type, subject (the aggregate id), time, partitionkey (the aggregate
// id), aggregatetype, aggregatesequence, schemaversion; in that order.
std::vector<std::pair<std::string, std::string>> cloudevents_attributes(const Event& event,
                                                                        const std::string& source);

// PostgreSQL's timestamptz text as RFC 3339 in UTC ("2026-12-03T06:53:12.123456Z"); the text as
// it is when it does not read as a timestamp.
std::string rfc3339(std::string_view timestamptz);

}  // namespace outbox::detail
