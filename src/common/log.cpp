#include "common/log.hpp"

#include <fmt/chrono.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "outbox/log.hpp"

namespace outbox::detail {

namespace {

constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v";

// One JSON object per line. The message is escaped by the JSON writer (a newline in a value
// cannot forge a second line) and bytes that are not UTF-8 are replaced, so every line parses.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count() % 1000;
    const nlohmann::json line = {
        {"ts", fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z",
                           fmt::gmtime(std::chrono::system_clock::to_time_t(msg.time)), millis)},
        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())},
        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  [[nodiscard]] std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

void apply(spdlog::logger& logger, LogFormat format) {
  if (format == LogFormat::json) {
    logger.set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger.set_formatter(std::make_unique<spdlog::pattern_formatter>(kTextPattern));
  }
}

}  // namespace

// Never destroyed: librdkafka's threads log through it (kafka::log_line), and a client an
// application keeps in a static, or one still running when exit() is called, can log after
// function-local statics are gone.
spdlog::logger& log() {
  static const auto* const logger = new std::shared_ptr<spdlog::logger>([] {
    if (auto existing = spdlog::get("outbox")) return existing;
    auto created = spdlog::stderr_color_mt("outbox");
    const char* format = std::getenv("OUTBOX_LOG_FORMAT");
    apply(*created, format != nullptr && std::string_view(format) == "json" ? LogFormat::json
                                                                            : LogFormat::text);
    // OUTBOX_LOG_LEVEL=debug|info|warn|error|off; unknown values keep "info".
    if (const char* level = std::getenv("OUTBOX_LOG_LEVEL")) {
      const auto parsed = spdlog::level::from_str(level);
      if (parsed != spdlog::level::off || std::string_view(level) == "off")
        created->set_level(parsed);
    }
    return created;
  }());
  return **logger;
}

}  // namespace outbox::detail

namespace outbox {

void set_log_format(LogFormat format) { detail::apply(detail::log(), format); }

void write_log(LogLevel level, std::string_view message) {
  switch (level) {
    case LogLevel::debug:
      detail::log().debug("{}", message);
      break;
    case LogLevel::info:
      detail::log().info("{}", message);
      break;
    case LogLevel::warn:
      detail::log().warn("{}", message);
      break;
    case LogLevel::error:
      detail::log().error("{}", message);
      break;
  }
}

}  // namespace outbox
