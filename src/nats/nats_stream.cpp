#include "nats/nats_stream.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.hpp"
#include "nats/nats_common.hpp"
#include "outbox/error.hpp"
#include "sinks/key_template.hpp"

namespace outbox::nats {
namespace {

using namespace std::chrono_literals;

constexpr std::chrono::minutes kDefaultWindow{2};  // JetStream's own default

long long to_seconds(std::chrono::nanoseconds duration) {
  return std::chrono::duration_cast<std::chrono::seconds>(duration).count();
}

// Refuses what outbox must not publish to; says what it found once.
void check_config(const jsStreamConfig& config, const StreamRequirements& requirements) {
  const std::chrono::nanoseconds window(config.Duplicates);
  if (requirements.longest_retry.count() > 0 && window < requirements.longest_retry) {
    throw ConfigError(fmt::format(
        "NATS stream {} keeps message ids for duplicate detection {} s, less than the longest "
        "time between two sends of one event ({} s: the relay's longest backoff or lease, and "
        "the ack timeout): a resend after the window would be stored twice. Raise the window "
        "(nats stream edit {} --dupe-window {}s) or lower --backoff-max-ms / --lease-ms",
        requirements.stream, to_seconds(window), to_seconds(requirements.longest_retry),
        requirements.stream, to_seconds(requirements.longest_retry) + 60));
  }
  if (config.Storage == js_MemoryStorage && !requirements.allow_memory_storage) {
    throw ConfigError(fmt::format(
        "NATS stream {} keeps its messages in memory: a server restart empties it, after outbox "
        "marked them published. Use a file-storage stream, or pass --nats-allow-memory-storage "
        "to accept that",
        requirements.stream));
  }
  const std::string filter = subject_filter(requirements.subject_template);
  bool covered = false;
  for (int i = 0; i < config.SubjectsLen && !covered; ++i) {
    covered = subject_covers(config.Subjects[i], filter);
  }
  if (!covered) {
    throw ConfigError(fmt::format(
        "NATS stream {} does not take every subject of the template ({}): events on the others "
        "would be refused for ever. Add it to the stream's subjects (nats stream edit {} "
        "--subjects ...) or change --nats-subject-template",
        requirements.stream, filter, requirements.stream));
  }
  detail::log().info("NATS stream {}: {} storage, {} replica(s), duplicate window {} s",
                     requirements.stream, config.Storage == js_MemoryStorage ? "memory" : "file",
                     config.Replicas, to_seconds(window));
}

std::string create(jsCtx* js, const StreamRequirements& requirements) {
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const std::string filter = subject_filter(requirements.subject_template);
  const char* subjects[] = {filter.c_str()};
  config.Name = requirements.stream.c_str();
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::max<std::chrono::milliseconds>(
                              kDefaultWindow, requirements.longest_retry + std::chrono::minutes(1)))
                          .count();
  jsStreamInfo* raw = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status = js_AddStream(&raw, js, &config, nullptr, &code);
  const StreamInfoHandle info(raw);
  if (status == NATS_OK) {
    detail::log().info("NATS stream {} created for subjects {}", requirements.stream, filter);
    check_config(*info->Config, requirements);
    return {};
  }
  if (code != 0) {
    throw ConfigError(fmt::format("NATS: cannot create stream {} for subjects {}: {} (error {})",
                                  requirements.stream, filter, error_text(status),
                                  static_cast<int>(code)));
  }
  return "cannot create stream " + requirements.stream + ": " + error_text(status);
}

}  // namespace

std::string subject_filter(const std::string& subject_template) {
  return detail::key_filter(subject_template, "*");
}

std::string ensure_stream(jsCtx* js, const StreamRequirements& requirements) {
  jsStreamInfo* raw = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = 2000;
  const natsStatus status =
      js_GetStreamInfo(&raw, js, requirements.stream.c_str(), &options, &code);
  const StreamInfoHandle info(raw);
  if (status == NATS_OK) {
    check_config(*info->Config, requirements);
    return {};
  }
  if (status == NATS_NOT_FOUND || code == JSStreamNotFoundErr) {
    if (requirements.create) return create(js, requirements);
    throw ConfigError(fmt::format(
        "NATS stream {} does not exist: create it for subjects {} with file storage (nats stream "
        "add {} --subjects '{}' --storage file --dupe-window 2m), or pass --nats-create-stream",
        requirements.stream, subject_filter(requirements.subject_template), requirements.stream,
        subject_filter(requirements.subject_template)));
  }
  if (status == NATS_NO_RESPONDERS) {
    return "no JetStream answered (is the server started with JetStream enabled, -js?)";
  }
  return "cannot read stream " + requirements.stream + ": " + error_text(status);
}

}  // namespace outbox::nats
