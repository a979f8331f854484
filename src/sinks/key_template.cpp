#include "sinks/key_template.hpp"

#include <string_view>

#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "outbox/partition.hpp"

namespace outbox::detail {
namespace {

constexpr std::string_view kAggregateType = "{aggregate_type}";
constexpr std::string_view kEventType = "{event_type}";
constexpr std::string_view kPartition = "{partition}";

// Calls `text(piece)` for literal text and `field(placeholder)` for each placeholder, in order.
template <typename Text, typename Field>
void walk(const std::string& key_template, Text text, Field field) {
  for (std::size_t i = 0; i < key_template.size();) {
    bool matched = false;
    for (const auto placeholder : {kAggregateType, kEventType, kPartition}) {
      if (key_template.compare(i, placeholder.size(), placeholder) == 0) {
        field(placeholder);
        i += placeholder.size();
        matched = true;
        break;
      }
    }
    if (!matched) text(key_template[i++]);
  }
}

}  // namespace

void check_key_template(const std::string& key_template, const std::string& broker,
                        const std::string& flag, const std::string& example) {
  if (key_template.find("{aggregate_id}") != std::string::npos) {
    throw ConfigError(
        broker +
        " template: {aggregate_id} is not allowed. An aggregate id may hold dots, "
        "spaces and wildcards, which a key word cannot, and a key per aggregate costs the server "
        "memory per key; use {partition} (the aggregate's partition of " +
        flag + ", Kafka's murmur2 hash), e.g. " + example);
  }
  for (std::size_t open = key_template.find('{'); open != std::string::npos;
       open = key_template.find('{', open + 1)) {
    bool known = false;
    for (const auto placeholder : {kAggregateType, kEventType, kPartition}) {
      known = known || key_template.compare(open, placeholder.size(), placeholder) == 0;
    }
    if (!known) {
      throw ConfigError(broker + " template \"" + printable(key_template, 300) +
                        "\" has an unknown placeholder; use {aggregate_type}, {event_type} and "
                        "{partition}");
    }
  }
}

std::string render_key(const std::string& key_template, const Event& event,
                       std::uint32_t partitions) {
  std::string key;
  key.reserve(key_template.size() + 16);
  walk(
      key_template, [&](char c) { key += c; },
      [&](std::string_view placeholder) {
        if (placeholder == kAggregateType) {
          key += event.aggregate_type;
        } else if (placeholder == kEventType) {
          key += event.event_type;
        } else {
          key += std::to_string(aggregate_partition(event.aggregate_id, partitions));
        }
      });
  return key;
}

std::string key_filter(const std::string& key_template, const std::string& wildcard) {
  std::string filter;
  walk(
      key_template, [&](char c) { filter += c; },
      [&](std::string_view /*placeholder*/) { filter += wildcard; });
  return filter;
}

}  // namespace outbox::detail
