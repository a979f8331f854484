#pragma once
// The backlog query: what is pending, quarantined and waiting, by aggregate type, and the
// aggregates whose head waited longest. One definition for every place that shows those numbers
// (the backlog gauges and the admin page through observe/backlog_monitor.hpp, `outbox status`
// through ops/status.cpp), so they agree.

#include <string>

#include "outbox/schema.hpp"

namespace outbox::detail {

// Columns: kind ('type' or 'slow'), aggregate_type, aggregate_id ('slow' only), pending,
// age in seconds, quarantined and in doubt ('type' only). See backlog_sql.cpp for what each
// counts.
std::string backlog_sql(const SchemaName& schema);

}  // namespace outbox::detail
