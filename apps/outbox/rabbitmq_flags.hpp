#pragma once
// `outbox relay --sink rabbitmq`: the RabbitMQ sink's flags (and config keys of the same names),
// and the RabbitMqSinkOptions they make.

#include <chrono>
#include <string>

#include "outbox/rabbitmq_sink.hpp"

namespace CLI {
class App;
}

namespace outbox::cli {

struct RabbitMqFlags {
  std::string url = RabbitMqSinkOptions{}.url;
  std::string exchange = RabbitMqSinkOptions{}.exchange;
  std::string routing_key_template = RabbitMqSinkOptions{}.routing_key_template;
  std::uint32_t partitions = RabbitMqSinkOptions{}.partitions;
  bool declare_exchange = false;
  std::string confirm_timeout = "5s";
  std::string cloudevents_source;

  bool operator==(const RabbitMqFlags&) const = default;
};

void add_rabbitmq_options(CLI::App* command, RabbitMqFlags& flags);

// `lease`: the relay's; the confirm timeout must end before it.
RabbitMqSinkOptions rabbitmq_sink_options(const RabbitMqFlags& flags,
                                          std::chrono::milliseconds lease);

// Whether any --rabbitmq-* flag was given (they are refused with another sink).
inline bool any_rabbitmq_flag(const RabbitMqFlags& flags) { return !(flags == RabbitMqFlags{}); }

}  // namespace outbox::cli
