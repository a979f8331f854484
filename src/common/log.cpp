#include "common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace outbox::detail {

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("outbox")) return existing;
    auto created = spdlog::stderr_color_mt("outbox");
    created->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
    return created;
  }();
  return *logger;
}

}  // namespace outbox::detail
