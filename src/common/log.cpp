#include "common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string_view>

namespace outbox::detail {

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("outbox")) return existing;
    auto created = spdlog::stderr_color_mt("outbox");
    created->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
    // OUTBOX_LOG_LEVEL=debug|info|warn|error|off; unknown values keep "info".
    if (const char* level = std::getenv("OUTBOX_LOG_LEVEL")) {
      const auto parsed = spdlog::level::from_str(level);
      if (parsed != spdlog::level::off || std::string_view(level) == "off")
        created->set_level(parsed);
    }
    return created;
  }();
  return *logger;
}

}  // namespace outbox::detail
