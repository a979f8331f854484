#pragma once
// `outbox relay --sink nats`: the NATS JetStream sink's flags (and config keys of the same
// names), and the NatsSinkOptions they make.

#include <chrono>
#include <string>

#include "outbox/nats_sink.hpp"

namespace CLI {
class App;
}

namespace outbox::cli {

struct NatsFlags {
  std::string servers = NatsSinkOptions{}.servers;
  std::string stream = NatsSinkOptions{}.stream;
  std::string subject_template = NatsSinkOptions{}.subject_template;
  std::uint32_t partitions = NatsSinkOptions{}.partitions;
  bool create_stream = false;
  bool allow_memory_storage = false;
  std::string ack_timeout = "5s";
  std::string credentials_file;
  std::string ca_file;
  std::string cloudevents_source;
};

void add_nats_options(CLI::App* command, NatsFlags& flags);

// `lease` and `backoff_max`: the relay's; the ack timeout must end before the lease, and the
// stream's duplicate window must outlast the longest wait between two sends of one event.
NatsSinkOptions nats_sink_options(const NatsFlags& flags, std::chrono::milliseconds lease,
                                  std::chrono::milliseconds backoff_max);

// Whether any --nats-* flag was given (they are refused with another sink).
bool any_nats_flag(const NatsFlags& flags);

}  // namespace outbox::cli
