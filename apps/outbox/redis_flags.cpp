#include "redis_flags.hpp"

#include <CLI/CLI.hpp>

#include "outbox/duration.hpp"

namespace outbox::cli {

void add_redis_options(CLI::App* command, RedisFlags& flags) {
  const char* group = "Redis Streams sink (--sink redis)";
  command
      ->add_option("--redis-url", flags.url,
                   "redis://[[user]:password@]host[:port][/db] (percent-encode ':', '@', '/' in "
                   "the password)")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--redis-stream-template", flags.stream_template,
                   "stream per event; {aggregate_type} and {partition} (the aggregate's "
                   "partition of --redis-partitions, Kafka's murmur2) are replaced")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--redis-partitions", flags.partitions,
                   "how many streams per aggregate type {partition} spreads the aggregates over")
      ->check(CLI::Range(1U, 4096U))
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--redis-dedup-window", flags.dedup_window,
                   "a repeat of an event id within this is not appended again; at least the "
                   "relay's longest retry, max(--lease-ms, --backoff-max-ms) + "
                   "--redis-reply-timeout; default: that or 2m, whichever is longer (5m5s with "
                   "the other defaults)")
      ->group(group);
  command
      ->add_option("--redis-reply-timeout", flags.reply_timeout,
                   "no reply by then: an unknown outcome, sent again (the dedup window absorbs "
                   "it)")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--redis-retention", flags.retention,
                   "trim entries older than this that every consumer group has acknowledged "
                   "(0: never trim)")
      ->capture_default_str()
      ->group(group);
  command
      ->add_flag("--redis-allow-volatile-acks", flags.allow_volatile_acks,
                 "accept a server without appendonly yes and appendfsync always, whose crash "
                 "can lose entries it acknowledged")
      ->group(group);
}

RedisSinkOptions redis_sink_options(const RedisFlags& flags, std::chrono::milliseconds lease,
                                    std::chrono::milliseconds backoff_max) {
  RedisSinkOptions options;
  options.url = flags.url;
  options.stream_template = flags.stream_template;
  options.partitions = flags.partitions;
  options.reply_timeout = parse_duration(flags.reply_timeout);
  options.max_reply_timeout = lease;
  // A resend follows an unknown outcome after at most the longest backoff, or a dead relay's
  // claim after its lease; the first append may have happened a reply timeout before.
  options.min_dedup_window = std::max(lease, backoff_max) + options.reply_timeout;
  // The longest retry is the least; a server's restart or a network outage between the first
  // append and the resend that gets through comes on top, hence 2 minutes at least by default.
  options.dedup_window =
      flags.dedup_window.empty()
          ? std::max<std::chrono::milliseconds>(std::chrono::minutes(2), options.min_dedup_window)
          : parse_duration(flags.dedup_window);
  options.retention =
      flags.retention == "0" ? std::chrono::milliseconds(0) : parse_duration(flags.retention);
  options.allow_volatile_acks = flags.allow_volatile_acks;
  return options;
}

}  // namespace outbox::cli
