// RedisInboxConsumer: hold a lock per stream, take over what a previous holder left pending, read
// the consumer group's entries of the held streams, apply them through the inbox in one
// transaction, then XACK them.

#include "outbox/redis_consumer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "common/fault.hpp"
#include "common/health_board.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "inbox/apply_batch.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "redis/redis_common.hpp"
#include "redis/redis_scripts.hpp"
#include "sinks/key_template.hpp"

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;

std::string default_consumer() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}-{}", host, ::getpid());
}

void check_options(const RedisConsumerOptions& options) {
  redis::parse_url(options.url);
  if (options.streams.empty()) {
    throw ConfigError("Redis consumer: no streams to read (e.g. outbox:order:0 ... 15)");
  }
  if (options.group.empty() || options.batch < 1 || options.batch > 10000) {
    throw ConfigError(fmt::format(
        "Redis consumer: the group must be set and batch be 1 to 10000 (batch {})", options.batch));
  }
  if (options.lease < std::chrono::seconds(1) || options.retry_backoff_base.count() <= 0 ||
      options.retry_backoff_max < options.retry_backoff_base) {
    throw ConfigError(
        "Redis consumer: the lease must be at least 1 s, retry_backoff_base positive and "
        "retry_backoff_max at least as large");
  }
}

struct Entry {
  std::size_t stream = 0;  // index into the streams
  std::string id;
  ConsumedEvent event;
};

}  // namespace

std::vector<std::string> redis_streams(const std::string& stream_template,
                                       const std::string& aggregate_type,
                                       std::uint32_t partitions) {
  std::vector<std::string> streams;
  Event event;
  event.aggregate_type = aggregate_type;
  for (std::uint32_t p = 0; p < partitions; ++p) {
    // render_key takes the partition from an aggregate id: put the number in by hand.
    const std::string marker = "{partition}";
    std::string text = stream_template;
    for (auto at = text.find(marker); at != std::string::npos; at = text.find(marker)) {
      text.replace(at, marker.size(), std::to_string(p));
    }
    streams.push_back(detail::render_key(text, event, partitions));
    if (stream_template.find(marker) == std::string::npos) break;
  }
  return streams;
}

class RedisInboxConsumer::Impl {
 public:
  Impl(RedisConsumerOptions options, Effect effect)
      : options_(std::move(options)),
        effect_(std::move(effect)),
        inbox_(options_.schema,
               options_.consumer_name.empty() ? options_.group : options_.consumer_name,
               options_.ordering, options_.upcasters),
        health_("redis consumer " + options_.group),
        endpoint_(redis::parse_url(options_.url)),
        database_(pg::Connection::open(options_.database_url, "outbox-consumer")) {
    check_options(options_);
    if (!effect_) throw InvalidArgument("Redis consumer: the effect is empty");
    if (options_.consumer.empty()) options_.consumer = default_consumer();
    lease_ = std::to_string(options_.lease.count());
    // The locks' value: this process, not its consumer name, which two live processes may share
    // (one configuration for every replica): a lock held under a name would be held by both.
    std::random_device random;
    token_ = fmt::format("{}/{:08x}{:08x}", options_.consumer, random(), random());
    for (const std::string& stream : options_.streams) {
      streams_.push_back(
          Stream{stream, stream + ":outbox-lock:" + options_.group, false, true, {}, {}});
    }
  }

  ~Impl() {
    // Let the streams go at once rather than after the lease: another consumer takes them over.
    if (connection_ == nullptr || connection_->broken()) return;
    std::vector<std::string_view> args{"EVAL", redis::kUnlockScript};
    const std::string count = std::to_string(streams_.size());
    args.emplace_back(count);
    for (const Stream& s : streams_) args.emplace_back(s.lock);
    args.emplace_back(token_);
    try {
      connection_->command(args);
    } catch (const Error&) {
      // The locks lapse after the lease.
    }
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::size_t poll(std::chrono::milliseconds max_wait) {
    if (!database_.healthy()) {
      database_ = pg::Connection::open(options_.database_url, "outbox-consumer");
      ++counters_.reconnects;
    }
    inbox_.tend(database_.get(), effect_, counters_, effect_threw_);
    try {
      return poll_redis(max_wait);
    } catch (const BrokerError&) {
      if (connection_ != nullptr && connection_->broken()) drop_connection();
      throw;
    }
  }

  void run() {
    detail::run_until_stopped(health_, options_.retry_backoff_base, options_.retry_backoff_max,
                              stop_, effect_threw_, [this] {
                                effect_threw_ = false;
                                poll(std::chrono::milliseconds(200));
                              });
  }

  void request_stop() noexcept { stop_.store(true); }

  RedisConsumerStats stats() const {
    RedisConsumerStats s;
    OUTBOX_STAT_COPY(OUTBOX_REDIS_CONSUMER_STATS, counters_, s);
    std::tie(s.health, s.last_error) = health_.snapshot();
    return s;
  }

 private:
  struct Stream {
    std::string name;
    std::string lock;
    bool held = false;
    bool history = true;              // read this consumer's pending entries before new ones
    Clock::time_point valid_until{};  // the lock, by this process's clock
    std::string last_read;            // the last new entry this process read; "": none yet
  };

  std::size_t poll_redis(std::chrono::milliseconds max_wait) {
    if (connection_ == nullptr) connect();
    if (Clock::now() >= next_lock_refresh_) refresh_locks();
    std::vector<std::size_t> reading;
    bool history = false;
    for (std::size_t i = 0; i < streams_.size(); ++i)
      history = history || (streams_[i].held && streams_[i].history);
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].held && streams_[i].history == history) reading.push_back(i);
    }
    if (reading.empty()) {
      std::this_thread::sleep_for(std::min(max_wait, std::chrono::milliseconds(200)));
      return 0;
    }
    std::vector<Entry> entries = read(reading, history, max_wait);
    if (history) {
      // A stream whose pending entries are all read again goes on with new ones.
      for (const std::size_t i : reading) {
        bool any = false;
        for (const Entry& e : entries) any = any || e.stream == i;
        streams_[i].history = any;
      }
      counters_.redeliveries += entries.size();
    }
    if (entries.empty()) return 0;
    counters_.received += entries.size();
    if (health_.health() == Health::broker_unavailable) health_.set(Health::running);
    apply(entries);
    return entries.size();
  }

  void connect() {
    auto connection = std::make_unique<redis::Connection>(endpoint_, options_.connect_timeout);
    for (const Stream& s : streams_) {
      // Only a missing group is created: XGROUP CREATE is refused at maxmemory even for a group
      // that exists, and a consumer must start then to free memory.
      if (has_group(*connection, s.name)) continue;
      const redis::Reply reply =
          connection->command({"XGROUP", "CREATE", s.name, options_.group, "0", "MKSTREAM"});
      if (redis::is_error(reply.get()) && redis::error_code(reply.get()) != "BUSYGROUP") {
        throw BrokerError("Redis consumer: cannot create group " + options_.group + " on " +
                              detail::printable(s.name) + ": " + redis::text(reply.get()),
                          0, redis::error_code(reply.get()) != "WRONGTYPE");
      }
    }
    connection_ = std::move(connection);
    for (Stream& s : streams_) s = Stream{s.name, s.lock, false, true, {}, {}};
    next_lock_refresh_ = Clock::now();
    detail::log().info("redis consumer {}: group {} on {} stream(s) at {}", options_.consumer,
                       options_.group, streams_.size(), redis::describe(endpoint_));
  }

  bool has_group(redis::Connection& connection, const std::string& stream) const {
    const redis::Reply groups = connection.command({"XINFO", "GROUPS", stream});
    if (groups->type != REDIS_REPLY_ARRAY) return false;  // no such stream yet
    for (std::size_t i = 0; i < groups->elements; ++i) {
      if (redis::text(redis::field(groups->element[i], "name")) == options_.group) return true;
    }
    return false;
  }

  void drop_connection() {
    connection_.reset();
    ++counters_.reconnects;
    for (Stream& s : streams_) s.held = false;
    counters_.redis_streams_held = 0;
  }

  // Renews the locks this consumer holds and takes free ones; a stream taken now starts with
  // what its previous holder (or this consumer, before a restart) left pending.
  void refresh_locks() {
    const auto now = Clock::now();
    std::vector<std::string_view> args{"EVAL", redis::kLockScript};
    const std::string count = std::to_string(streams_.size());
    args.emplace_back(count);
    for (const Stream& s : streams_) args.emplace_back(s.lock);
    args.emplace_back(token_);
    args.emplace_back(lease_);
    const redis::Reply reply = connection_->checked(args, "the stream locks");
    std::uint64_t held = 0;
    for (std::size_t i = 0; i < streams_.size() && i < reply->elements; ++i) {
      Stream& s = streams_[i];
      const long long state = reply->element[i]->integer;
      if (state == 0) {
        s.held = false;
        continue;
      }
      if (state == 2 || !s.held) {
        claim(s);
        s.history = true;
        s.last_read.clear();  // another process may have read past it
        detail::log().info("redis consumer {}: reading {}", options_.consumer,
                           detail::printable(s.name));
      }
      s.held = true;
      // A margin for the round trip and clock rates: the lock is treated as lost a little early.
      s.valid_until = now + options_.lease * 3 / 4;
      ++held;
    }
    counters_.redis_streams_held = held;
    next_lock_refresh_ =
        now + (held == streams_.size() ? options_.lease / 4 : std::chrono::milliseconds(1000));
  }

  // Moves every entry of the group's pending list on `s` to this consumer: whoever had them
  // holds the stream's lock no more. Entries deleted while pending leave the list (counted).
  void claim(const Stream& s) {
    std::string cursor = "0-0";
    do {
      const redis::Reply reply =
          connection_->checked({"XAUTOCLAIM", s.name, options_.group, options_.consumer, "0",
                                cursor, "COUNT", "1000", "JUSTID"},
                               "XAUTOCLAIM on " + s.name);
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2) break;
      cursor = redis::text(reply->element[0]);
      counters_.redis_claimed += reply->element[1]->elements;
      if (reply->elements > 2 && reply->element[2]->elements > 0) {
        counters_.rejected += reply->element[2]->elements;
        detail::log().error(
            "redis consumer {}: {} entr(ies) of {} were deleted while pending: never applied",
            options_.consumer, reply->element[2]->elements, detail::printable(s.name));
      }
    } while (cursor != "0-0" && !cursor.empty());
  }

  // What `reading` holds for this consumer: its pending entries (history), or new ones, waiting
  // up to `max_wait` (within the locks' validity) for some to come.
  std::vector<Entry> read(const std::vector<std::size_t>& reading, bool history,
                          std::chrono::milliseconds max_wait) {
    std::vector<Entry> entries = read_fenced(reading, history);
    if (!entries.empty() || history || max_wait.count() <= 0) return entries;
    auto wait = max_wait;
    for (const std::size_t i : reading) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                streams_[i].valid_until - Clock::now()));
    }
    if (wait.count() <= 0) return entries;
    // Wait for an entry after the last this process read of each (XREAD takes nothing), then
    // read through the fence. Where it read none yet ("$": what is appended from now), an append
    // between the two reads waits out this wait: latency, never a lost entry.
    std::vector<std::string_view> args{"XREAD", "COUNT", "1"};
    const std::string block = std::to_string(wait.count());
    args.insert(args.end(), {"BLOCK", block, "STREAMS"});
    for (const std::size_t i : reading) args.emplace_back(streams_[i].name);
    for (const std::size_t i : reading) {
      // Not a conditional expression: its std::string would be a temporary the view outlives.
      if (streams_[i].last_read.empty()) {
        args.emplace_back("$");
      } else {
        args.emplace_back(streams_[i].last_read);
      }
    }
    connection_->set_timeout(wait + options_.connect_timeout);
    const auto restore = [this] { connection_->set_timeout(options_.connect_timeout); };
    try {
      const redis::Reply woke = connection_->checked(args, "XREAD");
      restore();
      if (woke->type != REDIS_REPLY_ARRAY) return entries;  // nothing within the wait
    } catch (...) {
      if (!connection_->broken()) restore();
      throw;
    }
    entries = read_fenced(reading, false);
    // Entries came and the fence gave none: a lock this process thinks it holds lapsed.
    if (entries.empty()) next_lock_refresh_ = Clock::now();
    return entries;
  }

  // XREADGROUP through the read script: only the streams whose lock this process holds on the
  // server, so a process whose lock lapsed (paused past the lease) takes no entry.
  std::vector<Entry> read_fenced(const std::vector<std::size_t>& reading, bool history) {
    const std::string keys = std::to_string(reading.size() * 2);
    // At most `batch` in all, at least one per stream.
    const std::string count =
        std::to_string(std::max<std::size_t>(1, options_.batch / reading.size()));
    std::vector<std::string_view> args{"EVAL", redis::kReadScript, keys};
    for (const std::size_t i : reading) args.emplace_back(streams_[i].name);
    for (const std::size_t i : reading) args.emplace_back(streams_[i].lock);
    args.insert(args.end(), {options_.group, options_.consumer, token_, count});
    for (std::size_t i = 0; i < reading.size(); ++i) args.emplace_back(history ? "0" : ">");
    const redis::Reply reply = connection_->checked(args, "XREADGROUP");
    std::vector<Entry> entries;
    for (std::size_t r = 0; r < reply->elements; ++r) {
      const redisReply* stream = reply->element[r];
      const std::string name = redis::text(stream->element[0]);
      std::size_t index = 0;
      while (index < streams_.size() && streams_[index].name != name) ++index;
      const redisReply* list = stream->element[1];
      for (std::size_t k = 0; k < list->elements; ++k) {
        const redisReply* item = list->element[k];
        Entry entry{index, redis::text(item->element[0]), {}};
        if (item->element[1]->type == REDIS_REPLY_ARRAY) {
          entry.event = redis::decode_entry(item->element[1]);
        }  // else deleted while pending: no fields, a nil id (skipped and acknowledged)
        entry.event.topic = name;
        if (!history && index < streams_.size()) streams_[index].last_read = entry.id;
        entries.push_back(std::move(entry));
      }
    }
    return entries;
  }

  void apply(const std::vector<Entry>& entries) {
    std::vector<ConsumedEvent> events;
    for (const Entry& e : entries) {
      if (!streams_[e.stream].held || Clock::now() >= streams_[e.stream].valid_until) {
        // The lock may have lapsed (this process was paused): another consumer may be applying
        // this stream. Leave the batch pending; whoever holds the stream reads it again.
        for (Stream& s : streams_) s.held = s.held && Clock::now() < s.valid_until;
        next_lock_refresh_ = Clock::now();
        throw BrokerError("Redis consumer: a stream's lock lapsed before the batch was applied", 0,
                          true);
      }
      if (e.event.event_id.is_nil()) {
        ++counters_.rejected;
        detail::log().error("redis consumer: entry {} on {} has no valid event_id; skipped", e.id,
                            detail::printable(streams_[e.stream].name));
        continue;
      }
      events.push_back(e.event);
    }
    try {
      const auto counts = inbox_.apply(database_.get(), events, effect_, effect_threw_);
      detail::count_batch(counters_, counts);
    } catch (...) {
      ++counters_.failed_batches;
      if (effect_threw_) ++counters_.effect_failures;
      // Still pending, in order: read again before anything newer.
      for (const Entry& e : entries) streams_[e.stream].history = true;
      throw;
    }
    OUTBOX_FAULT(fault::kConsumerAfterCommitBeforeOffset);
    acknowledge(entries);
  }

  // One XACK per stream. Not acknowledged (a lost connection): pending, read again first, and
  // the inbox makes the repeat a no-op.
  void acknowledge(const std::vector<Entry>& entries) {
    std::map<std::size_t, std::vector<std::string_view>> by_stream;
    for (const Entry& e : entries) by_stream[e.stream].push_back(e.id);
    for (auto& [index, ids] : by_stream) {
      std::vector<std::string_view> args{"XACK", streams_[index].name, options_.group};
      args.insert(args.end(), ids.begin(), ids.end());
      connection_->checked(args, "XACK");
    }
  }

  RedisConsumerOptions options_;
  Effect effect_;
  detail::InboxApplier inbox_;
  detail::HealthBoard health_;
  redis::Endpoint endpoint_;
  std::string lease_;
  std::string token_;
  std::vector<Stream> streams_;
  std::unique_ptr<redis::Connection> connection_;
  Clock::time_point next_lock_refresh_{};
  pg::Connection database_;
  std::atomic<bool> stop_{false};
  bool effect_threw_ = false;
  struct Counters {
    OUTBOX_REDIS_CONSUMER_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

RedisInboxConsumer::RedisInboxConsumer(RedisConsumerOptions options, Effect effect)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(effect))) {}
RedisInboxConsumer::~RedisInboxConsumer() = default;
std::size_t RedisInboxConsumer::poll(std::chrono::milliseconds max_wait) {
  return impl_->poll(max_wait);
}
void RedisInboxConsumer::run() { impl_->run(); }
void RedisInboxConsumer::request_stop() noexcept { impl_->request_stop(); }
RedisConsumerStats RedisInboxConsumer::stats() const { return impl_->stats(); }

std::vector<StatSample> stat_samples(const RedisConsumerStats& stats) {
  return OUTBOX_STAT_SAMPLES(OUTBOX_REDIS_CONSUMER_STATS, stats, detail::kPlain);
}

}  // namespace outbox
