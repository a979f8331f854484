#pragma once
// The JetStream stream the sink publishes to: checked (or created) before the first publish after
// each connect.

#include <nats/nats.h>

#include <chrono>
#include <string>

namespace outbox::nats {

struct StreamRequirements {
  std::string stream;
  std::string subject_template;  // its placeholders become "*" in a created stream's subjects
  bool create = false;
  bool allow_memory_storage = false;
  std::chrono::milliseconds longest_retry{0};  // the duplicate window's least length; 0: any
};

// The subject filter that takes every subject of `subject_template`: each placeholder as "*".
std::string subject_filter(const std::string& subject_template);

// Empty when the stream is there and fit; the reason when the server could not be asked (not
// connected, JetStream not answering): the caller tries again later. Throws ConfigError for a
// stream outbox must not publish to (missing without `create`, a duplicate window below
// longest_retry, memory storage without allow_memory_storage), saying what to change.
std::string ensure_stream(jsCtx* js, const StreamRequirements& requirements);

}  // namespace outbox::nats
