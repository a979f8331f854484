// The Redis Streams sink over hiredis: one connection, commands pipelined from the relay's thread
// (send() writes a script call without waiting, poll() reads the replies, which come in order).
// The socket is non-blocking: a server that stops reading fills hiredis's buffer, not the relay's
// thread.

#include "outbox/redis_sink.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>

#include <deque>
#include <thread>
#include <unordered_map>

#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "outbox/error.hpp"
#include "redis/redis_common.hpp"
#include "redis/redis_scripts.hpp"
#include "sinks/key_template.hpp"

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kMaxPartitions = 4096;

void check_options(const RedisSinkOptions& options) {
  redis::parse_url(options.url);
  if (options.stream_template.find("{event_type}") != std::string::npos) {
    throw ConfigError(
        "Redis stream template: {event_type} is not allowed: an aggregate's events of different "
        "types would go to different streams, read in no common order; use {aggregate_type} and "
        "{partition}, e.g. outbox:{aggregate_type}:{partition}");
  }
  detail::check_key_template(options.stream_template, "Redis stream", "--redis-partitions",
                             "outbox:{aggregate_type}:{partition}");
  if (options.stream_template.empty()) throw ConfigError("Redis: the stream template is empty");
  if (options.partitions < 1 || options.partitions > kMaxPartitions) {
    throw ConfigError(fmt::format("Redis: partitions must be 1 to {}, not {}", kMaxPartitions,
                                  options.partitions));
  }
  if (options.reply_timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    throw ConfigError("Redis: the reply and connect timeouts must be above 0");
  }
  if (options.max_reply_timeout.count() > 0 && options.reply_timeout >= options.max_reply_timeout) {
    throw ConfigError(fmt::format(
        "Redis: the reply timeout ({} ms) must end before the claim's lease ({} ms), or another "
        "relay could publish the event and its successor first; lower --redis-reply-timeout or "
        "raise --lease-ms",
        options.reply_timeout.count(), options.max_reply_timeout.count()));
  }
  if (options.dedup_window.count() <= 0 || options.dedup_window < options.min_dedup_window) {
    throw ConfigError(fmt::format(
        "Redis: the dedup window ({} ms) must cover the relay's longest retry ({} ms: the lease "
        "or the backoff, and the reply timeout), or a takeover would append a second entry; "
        "raise --redis-dedup-window",
        options.dedup_window.count(), options.min_dedup_window.count()));
  }
  if (options.retention.count() < 0 || options.trim_interval.count() <= 0) {
    throw ConfigError(
        "Redis: the retention must be 0 (no trimming) or more, the trim interval above 0");
  }
}

// The Redis sink's own statistics (outbox/stats.hpp; Sink::stats()).
#define OUTBOX_REDIS_SINK_STATS(X)                                                               \
  X(redis_duplicates, counter, when_set, "outbox_relay_redis_duplicates_total",                  \
    "{} Redis duplicate(s)",                                                                     \
    "Appends the sink's script refused because the event id was appended within the dedup "      \
    "window (a resend after an unknown outcome or a takeover): published, one entry.")           \
  X(redis_errors, counter, when_set, "outbox_relay_redis_errors_total", "{} Redis error(s)",     \
    "Appends the server answered with an error (OOM under maxmemory, a read-only replica, a "    \
    "key of another type): failed, retried or quarantined.")                                     \
  X(redis_reply_timeouts, counter, when_set, "outbox_relay_redis_reply_timeouts_total",          \
    "{} Redis reply timeout(s)",                                                                 \
    "Appends with no reply within the reply timeout, or unanswered when the connection was "     \
    "lost: unknown outcomes, sent again (the dedup window absorbs a second append).")            \
  X(redis_send_stalls, counter, when_set, "outbox_relay_redis_send_stalls_total",                \
    "{} Redis send stall(s)",                                                                    \
    "Sends refused because the server stopped reading the connection (too many bytes unsent). "  \
    "Retried.")                                                                                  \
  X(redis_reconnects, counter, when_set, "outbox_relay_redis_reconnects_total",                  \
    "Redis reconnected {} time(s)", "New connections to the server after a lost one.")           \
  X(redis_trimmed, counter, when_set, "outbox_relay_redis_trimmed_entries_total",                \
    "{} Redis entries trimmed", "Stream entries removed by the retention.")                      \
  X(redis_trim_held_back_ms, gauge, when_set, "outbox_relay_redis_trim_held_back_seconds",       \
    "Redis trim held back {} ms",                                                                \
    "How long past the retention the oldest stream entry a consumer group has not acknowledged " \
    "is kept (the longest over the streams; 0: none held back).")

class RedisSink final : public Sink {
 public:
  explicit RedisSink(const RedisSinkOptions& options)
      : options_(options), endpoint_(redis::parse_url(options.url)) {
    check_options(options_);
    window_ = std::to_string(options_.dedup_window.count());
    retention_ = std::to_string(options_.retention.count());
  }

  void send(const Event& event, std::uint64_t ticket) override {
    if (const std::string not_ready = ensure_connected(); !not_ready.empty()) {
      report(ticket, DeliveryOutcome::retryable_failure, not_ready);
      return;
    }
    if (unsent_bytes() > options_.max_unsent_bytes) {
      counters_.redis_send_stalls.fetch_add(1, std::memory_order_relaxed);
      report(ticket, DeliveryOutcome::retryable_failure,
             fmt::format("Redis is not reading from the connection ({} bytes unsent)",
                         unsent_bytes()));
      return;
    }
    const std::string stream =
        detail::render_key(options_.stream_template, event, options_.partitions);
    const std::string dedup = stream + ":outbox-dedup";
    redis::EntryNumbers numbers;
    const std::vector<std::string_view> fields = redis::entry_fields(event, numbers);
    std::vector<std::string_view> args{"EVALSHA", publish_sha_, "2",    stream,
                                       dedup,     numbers[0],   window_};
    args.insert(args.end(), fields.begin(), fields.end());
    append(args);
    pending_.push_back(Pending{ticket, Clock::now() + options_.reply_timeout, false, stream});
    maybe_trim(stream);
    sweep_held_back();
    flush();
  }

  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    const auto until = Clock::now() + max_wait;
    while (connection_ != nullptr) {
      flush();
      // What has arrived, even when the relay asks not to wait (poll(0) while it is busy).
      for (int reads = 0; reads < 64 && connection_ != nullptr && wait_for_socket({}); ++reads) {
        take_replies();
      }
      take_replies();
      const auto now = Clock::now();
      if (!ready_.empty() || now >= until || connection_ == nullptr) break;
      if (!pending_.empty() && pending_.front().deadline <= now) break;
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
      if (!pending_.empty()) {
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  pending_.front().deadline - now));
      }
      wait_for_socket(std::max(wait, std::chrono::milliseconds(1)));
    }
    if (connection_ == nullptr && ready_.empty() && max_wait.count() > 0) {
      std::this_thread::sleep_for(std::min(max_wait, std::chrono::milliseconds(100)));
    }
    if (!pending_.empty() && pending_.front().deadline <= Clock::now()) {
      lose_connection(fmt::format("no reply within {} ms", options_.reply_timeout.count()));
    }
    reports.insert(reports.end(), std::make_move_iterator(ready_.begin()),
                   std::make_move_iterator(ready_.end()));
    ready_.clear();
  }

  [[nodiscard]] std::size_t in_flight() const override {
    std::size_t sends = ready_.size();
    for (const Pending& p : pending_) sends += p.trim ? 0 : 1;
    return sends;
  }
  [[nodiscard]] std::string describe() const override {
    return "redis(" + redis::describe(endpoint_) + ")";
  }
  [[nodiscard]] std::vector<StatSample> stats() const override {
    return OUTBOX_STAT_SAMPLES(OUTBOX_REDIS_SINK_STATS, counters_, detail::kRelaxed);
  }

 private:
  struct Pending {
    std::uint64_t ticket = 0;
    Clock::time_point deadline{};
    bool trim = false;  // a trim's reply, no send's
    std::string stream;
  };

  // Empty when connected (persistence checked, scripts loaded); else why not. An attempt blocks
  // the relay's thread for at most the connect timeout (a server that accepts and does not
  // answer), and the next comes a second after it ended.
  std::string ensure_connected() {
    if (connection_ != nullptr) return {};
    if (Clock::now() < next_connect_) return last_connect_error_;
    struct Pause {
      Clock::time_point& next;
      ~Pause() { next = Clock::now() + std::chrono::seconds(1); }
    } pause{next_connect_};
    try {
      auto connection = std::make_unique<redis::Connection>(endpoint_, options_.connect_timeout);
      redis::check_persistence(*connection, options_.allow_volatile_acks,
                               "--redis-allow-volatile-acks");
      publish_sha_ = redis::text(
          connection->checked({"SCRIPT", "LOAD", redis::kPublishScript}, "SCRIPT LOAD").get());
      trim_sha_ = redis::text(
          connection->checked({"SCRIPT", "LOAD", redis::kTrimScript}, "SCRIPT LOAD").get());
      // From here on the relay's thread never waits on the socket: non-blocking, polled.
      redisContext* context = connection->get();
      ::fcntl(context->fd, F_SETFL, ::fcntl(context->fd, F_GETFL) | O_NONBLOCK);
      context->flags &= ~REDIS_BLOCK;
      connection_ = std::move(connection);
      if (connected_before_) counters_.redis_reconnects.fetch_add(1, std::memory_order_relaxed);
      connected_before_ = true;
      detail::log().info("redis sink: connected to {}", redis::describe(endpoint_));
      return {};
    } catch (const BrokerError& error) {
      last_connect_error_ = error.what();
      return last_connect_error_;
    }
  }

  // A trim of `stream` goes after its append when the retention is on and the stream's last
  // trim is trim_interval old.
  void maybe_trim(const std::string& stream) {
    if (options_.retention.count() == 0) return;
    const auto now = Clock::now();
    auto [it, first] = next_trim_.try_emplace(stream, now);
    if (!first && now < it->second) return;
    it->second = now + options_.trim_interval;
    append({"EVALSHA", trim_sha_, "1", stream, retention_});
    pending_.push_back(Pending{0, now + options_.reply_timeout, true, stream});
  }

  // Streams a group held back are trimmed again even when nothing is appended to them, so the
  // gauge comes down once the group caught up (while the relay sends anything at all).
  void sweep_held_back() {
    const auto now = Clock::now();
    if (options_.retention.count() == 0 || now < next_sweep_) return;
    next_sweep_ = now + options_.trim_interval;
    std::vector<std::string> held;
    for (const auto& [stream, ms] : held_back_) {
      if (ms > 0) held.push_back(stream);
    }
    for (const std::string& stream : held) maybe_trim(stream);
  }

  void append(const std::vector<std::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const std::string_view arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    // Fails only when out of memory; before its pending entry is filed, so replies stay matched.
    if (redisAppendCommandArgv(connection_->get(), static_cast<int>(argv.size()), argv.data(),
                               lengths.data()) != REDIS_OK) {
      throw std::bad_alloc();
    }
  }

  std::size_t unsent_bytes() const {
    return connection_ == nullptr ? 0 : sdslen(connection_->get()->obuf);
  }

  void flush() {
    if (connection_ == nullptr || unsent_bytes() == 0) return;
    int done = 0;
    if (redisBufferWrite(connection_->get(), &done) != REDIS_OK) {
      lose_connection("write failed: " + connection_->error());
    }
  }

  // Waits up to `wait` for the socket; reads what came. True when something was read.
  bool wait_for_socket(std::chrono::milliseconds wait) {
    pollfd fd{connection_->get()->fd, POLLIN, 0};
    if (unsent_bytes() > 0) fd.events |= POLLOUT;
    if (::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(wait.count(), 1000))) <= 0) {
      return false;
    }
    if ((fd.revents & (POLLIN | POLLERR | POLLHUP)) == 0) return false;
    if (redisBufferRead(connection_->get()) != REDIS_OK) {
      lose_connection("connection lost: " + connection_->error());
      return false;
    }
    return true;
  }

  // Every complete reply read so far, matched to the oldest command waiting.
  void take_replies() {
    while (connection_ != nullptr && !pending_.empty()) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(connection_->get(), &raw) != REDIS_OK) {
        lose_connection("unreadable reply: " + connection_->error());
        return;
      }
      if (raw == nullptr) return;
      const redis::Reply reply(static_cast<redisReply*>(raw));
      Pending sent = std::move(pending_.front());
      pending_.pop_front();
      if (sent.trim) {
        take_trim(sent.stream, reply.get());
      } else {
        take_append(sent, reply.get());
      }
    }
  }

  void take_append(const Pending& sent, const redisReply* reply) {
    if (reply->type == REDIS_REPLY_STRING) {
      report(sent.ticket, DeliveryOutcome::published, {});
      return;
    }
    if (reply->type == REDIS_REPLY_INTEGER) {
      counters_.redis_duplicates.fetch_add(1, std::memory_order_relaxed);
      report(sent.ticket, DeliveryOutcome::published, {});
      return;
    }
    counters_.redis_errors.fetch_add(1, std::memory_order_relaxed);
    const std::string code = redis::error_code(reply);
    const std::string message = detail::printable(redis::text(reply), 300);
    if (code == "WRONGTYPE") {
      report(sent.ticket, DeliveryOutcome::permanent_failure,
             "Redis key " + detail::printable(sent.stream, 200) +
                 " exists and is not a stream: rename or delete it, or change "
                 "--redis-stream-template (" +
                 message + ")");
      return;
    }
    report(sent.ticket, DeliveryOutcome::retryable_failure, "Redis refused the append: " + message);
    // The scripts are gone (SCRIPT FLUSH) or the server became a replica: connect afresh.
    if (code == "NOSCRIPT" || code == "READONLY") lose_connection(message);
  }

  void take_trim(const std::string& stream, const redisReply* reply) {
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      detail::log().warn("redis sink: trimming {} failed: {}", detail::printable(stream),
                         detail::printable(redis::text(reply), 300));
      return;
    }
    counters_.redis_trimmed.fetch_add(static_cast<std::uint64_t>(reply->element[0]->integer),
                                      std::memory_order_relaxed);
    held_back_[stream] =
        static_cast<std::uint64_t>(std::max<long long>(reply->element[1]->integer, 0));
    std::uint64_t longest = 0;
    for (const auto& [name, ms] : held_back_) longest = std::max(longest, ms);
    counters_.redis_trim_held_back_ms.store(longest, std::memory_order_relaxed);
  }

  // Every unanswered append is an unknown outcome; the next send connects again.
  void lose_connection(const std::string& why) {
    std::size_t unanswered = 0;
    for (const Pending& sent : pending_) {
      if (sent.trim) continue;
      ++unanswered;
      counters_.redis_reply_timeouts.fetch_add(1, std::memory_order_relaxed);
      report(sent.ticket, DeliveryOutcome::unknown, "Redis: " + why + " before the reply");
    }
    detail::log().warn("redis sink: {}; {} unanswered append(s) will be sent again", why,
                       unanswered);
    pending_.clear();
    connection_.reset();
    last_connect_error_ = "Redis: " + why;
  }

  void report(std::uint64_t ticket, DeliveryOutcome outcome, std::string error) {
    ready_.push_back(DeliveryReport{ticket, outcome, std::move(error), -1, -1, {}});
  }

  RedisSinkOptions options_;
  redis::Endpoint endpoint_;
  std::string window_;
  std::string retention_;
  std::string publish_sha_;
  std::string trim_sha_;
  std::unique_ptr<redis::Connection> connection_;
  bool connected_before_ = false;
  Clock::time_point next_connect_{};
  std::string last_connect_error_;
  std::deque<Pending> pending_;  // in the order sent: replies come in that order
  std::vector<DeliveryReport> ready_;
  std::unordered_map<std::string, Clock::time_point> next_trim_;
  std::unordered_map<std::string, std::uint64_t> held_back_;
  Clock::time_point next_sweep_{};
  struct Counters {
    OUTBOX_REDIS_SINK_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

}  // namespace

std::unique_ptr<Sink> make_redis_sink(const RedisSinkOptions& options) {
  return std::make_unique<RedisSink>(options);
}

std::string render_redis_stream(const RedisSinkOptions& options, const Event& event) {
  return detail::render_key(options.stream_template, event, options.partitions);
}

}  // namespace outbox
