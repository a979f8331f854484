#pragma once
// The library logs through spdlog's logger "outbox" (stderr; OUTBOX_LOG_LEVEL sets its level).
// Its lines are text for a person by default, or one JSON object per line for a log pipeline:
//   {"ts":"2026-12-01T18:07:01.123Z","level":"info","logger":"outbox","msg":"relay r1 started"}
// OUTBOX_LOG_FORMAT=json chooses JSON before the first line; set_log_format() at any time.

#include <string_view>

namespace outbox {

enum class LogFormat { text, json };

void set_log_format(LogFormat format);

enum class LogLevel { debug, info, warn, error };

// One line through the library's logger, in its format: a program's own lines beside the
// library's. The text format writes `message` as it is: pass values that came from outside
// through printable() (outbox/text.hpp), or a newline in one forges a log line.
void write_log(LogLevel level, std::string_view message);

}  // namespace outbox
