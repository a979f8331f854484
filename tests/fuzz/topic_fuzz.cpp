// Topic templates and rendering: check_topic_template accepts or throws a printable ConfigError;
// render_topic agrees with a plain reference; topic_problem accepts exactly Kafka's legal,
// non-internal names; a template that passes its check renders a legal topic for the probe.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "kafka/kafka_topic.hpp"
#include "outbox/error.hpp"
#include "outbox/kafka.hpp"

namespace {

std::string reference_render(const std::string& topic_template, const std::string& aggregate_type,
                             const std::string& event_type) {
  std::string out;
  std::size_t i = 0;
  while (i < topic_template.size()) {
    if (topic_template.substr(i, 16) == "{aggregate_type}") {
      out += aggregate_type;
      i += 16;
    } else if (topic_template.substr(i, 12) == "{event_type}") {
      out += event_type;
      i += 12;
    } else {
      out += topic_template[i++];
    }
  }
  return out;
}

bool legal(const std::string& topic) {
  if (topic.empty() || topic.size() > 249 || topic == "." || topic == ".." ||
      topic.starts_with("__")) {
    return false;
  }
  for (const char c : topic) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  outbox::Event event;
  event.aggregate_type = input.ConsumeRandomLengthString(300);
  event.event_type = input.ConsumeRandomLengthString(300);
  const std::string topic_template = input.ConsumeRemainingBytesAsString();

  const std::string topic = outbox::render_topic(topic_template, event);
  if (topic != reference_render(topic_template, event.aggregate_type, event.event_type)) {
    outbox::fuzz::fail("render_topic differs from the reference", topic_template);
  }
  const std::string problem = outbox::kafka::topic_problem(topic);
  if (problem.empty() != legal(topic)) outbox::fuzz::fail("topic_problem is wrong", topic);
  if (!problem.empty()) outbox::fuzz::expect_printable_message(problem, topic);

  bool template_ok = true;
  try {
    outbox::kafka::check_topic_template(topic_template);
  } catch (const outbox::ConfigError& error) {
    template_ok = false;
    outbox::fuzz::expect_printable_message(error.what(), topic_template);
  }
  if (template_ok != legal(reference_render(topic_template, "x", "x"))) {
    outbox::fuzz::fail("check_topic_template disagrees with the rendered probe", topic_template);
  }
  return 0;
}
