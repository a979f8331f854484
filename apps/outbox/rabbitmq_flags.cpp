#include "rabbitmq_flags.hpp"

#include <CLI/CLI.hpp>

#include "outbox/duration.hpp"

namespace outbox::cli {

void add_rabbitmq_options(CLI::App* command, RabbitMqFlags& flags) {
  const char* group = "RabbitMQ sink (--sink rabbitmq)";
  command
      ->add_option("--rabbitmq-url", flags.url,
                   "amqp://user:password@host:port/vhost (a trailing / is the vhost /)")
      ->capture_default_str()
      ->group(group);
  command->add_option("--rabbitmq-exchange", flags.exchange, "the exchange to publish to")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--rabbitmq-routing-key-template", flags.routing_key_template,
                   "routing key per event; {aggregate_type}, {event_type} and {partition} (the "
                   "aggregate's partition of --rabbitmq-partitions, Kafka's murmur2) are replaced")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--rabbitmq-partitions", flags.partitions,
                   "how many partitions {partition} spreads the aggregates over")
      ->check(CLI::Range(1U, 4096U))
      ->capture_default_str()
      ->group(group);
  command
      ->add_flag("--rabbitmq-declare-exchange", flags.declare_exchange,
                 "declare the exchange (durable, topic) when it does not exist")
      ->group(group);
  command
      ->add_option("--rabbitmq-confirm-timeout", flags.confirm_timeout,
                   "no publisher confirm by then: an unknown outcome, sent again (the consumer's "
                   "inbox absorbs a second copy)")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--rabbitmq-cloudevents-source", flags.cloudevents_source,
                   "also write the CloudEvents AMQP binding's cloudEvents_ headers, with this "
                   "source")
      ->group(group);
}

RabbitMqSinkOptions rabbitmq_sink_options(const RabbitMqFlags& flags,
                                          std::chrono::milliseconds lease) {
  RabbitMqSinkOptions options;
  options.url = flags.url;
  options.exchange = flags.exchange;
  options.routing_key_template = flags.routing_key_template;
  options.partitions = flags.partitions;
  options.declare_exchange = flags.declare_exchange;
  options.confirm_timeout = parse_duration(flags.confirm_timeout);
  options.max_confirm_timeout = lease;
  options.cloudevents_source = flags.cloudevents_source;
  return options;
}

}  // namespace outbox::cli
