#pragma once
// The library's logger ("outbox"), created on first use; applications may replace its sinks or
// level through spdlog::get("outbox").

#include <spdlog/spdlog.h>

namespace outbox::detail {
spdlog::logger& log();
}  // namespace outbox::detail
