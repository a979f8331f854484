#include "nats_flags.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "outbox/duration.hpp"

namespace outbox::cli {

void add_nats_options(CLI::App* command, NatsFlags& flags) {
  const char* group = "NATS JetStream sink (--sink nats)";
  command
      ->add_option("--nats-servers", flags.servers,
                   "server URLs, comma separated (nats:// or tls://; a user and password may be "
                   "in the URL)")
      ->capture_default_str()
      ->group(group);
  command->add_option("--nats-stream", flags.stream, "the JetStream stream to publish to")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--nats-subject-template", flags.subject_template,
                   "subject per event; {aggregate_type}, {event_type} and {partition} (the "
                   "aggregate's partition of --nats-partitions, Kafka's murmur2) are replaced")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--nats-partitions", flags.partitions,
                   "how many partitions {partition} spreads the aggregates over")
      ->check(CLI::Range(1U, 4096U))
      ->capture_default_str()
      ->group(group);
  command
      ->add_flag("--nats-create-stream", flags.create_stream,
                 "create the stream when it does not exist (file storage, the template's "
                 "subjects, a duplicate window that outlasts the relay's retries)")
      ->group(group);
  command
      ->add_flag("--nats-allow-memory-storage", flags.allow_memory_storage,
                 "accept a memory-storage stream: a server restart loses what it acknowledged")
      ->group(group);
  command
      ->add_option("--nats-ack-timeout", flags.ack_timeout,
                   "no PubAck by then: an unknown outcome, sent again with the same Nats-Msg-Id")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--nats-credentials-file", flags.credentials_file,
                   "a .creds file (user JWT and NKey seed)")
      ->group(group);
  command->add_option("--nats-ca-file", flags.ca_file, "PEM bundle to verify tls:// servers with")
      ->group(group);
  command
      ->add_option("--nats-cloudevents-source", flags.cloudevents_source,
                   "also write the CloudEvents NATS binding's ce- headers, with this ce-source")
      ->group(group);
}

NatsSinkOptions nats_sink_options(const NatsFlags& flags, std::chrono::milliseconds lease,
                                  std::chrono::milliseconds backoff_max) {
  NatsSinkOptions options;
  options.servers = flags.servers;
  options.stream = flags.stream;
  options.subject_template = flags.subject_template;
  options.partitions = flags.partitions;
  options.create_stream = flags.create_stream;
  options.allow_memory_storage = flags.allow_memory_storage;
  options.ack_timeout = parse_duration(flags.ack_timeout);
  options.max_ack_timeout = lease;
  // A resend follows an unknown outcome after at most the longest backoff, or a dead relay's
  // claim after its lease; the first copy may have been stored an ack timeout before.
  options.longest_retry = std::max(lease, backoff_max) + options.ack_timeout;
  options.credentials_file = flags.credentials_file;
  options.ca_file = flags.ca_file;
  options.cloudevents_source = flags.cloudevents_source;
  return options;
}

bool any_nats_flag(const NatsFlags& flags) {
  const NatsFlags defaults;
  return flags.servers != defaults.servers || flags.stream != defaults.stream ||
         flags.subject_template != defaults.subject_template ||
         flags.partitions != defaults.partitions || flags.create_stream ||
         flags.allow_memory_storage || flags.ack_timeout != defaults.ack_timeout ||
         !flags.credentials_file.empty() || !flags.ca_file.empty() ||
         !flags.cloudevents_source.empty();
}

}  // namespace outbox::cli
