#pragma once
// What the Redis Streams sink, consumer and audit share over hiredis: the URL, a connection
// opened with timeouts (AUTH, SELECT), commands and their replies, the server's persistence
// check, and how an event is laid out as a stream entry.

#include <hiredis/hiredis.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/consumed_event.hpp"
#include "outbox/event.hpp"

namespace outbox::redis {

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user;  // empty: AUTH with the password alone (requirepass)
  std::string password;
  int db = 0;
};

// redis://[[user]:password@]host[:port][/db] (percent-encoding in the user and password). Throws
// ConfigError for anything else, rediss:// (TLS) included: hiredis 0.14 has no TLS.
Endpoint parse_url(const std::string& url);
// "host:port/db", without the password.
std::string describe(const Endpoint& endpoint);

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// A reply's text (status, error, string, verbatim); "" for other types.
std::string text(const redisReply* reply);
bool is_error(const redisReply* reply);
// An error reply's code: its first word ("OOM", "NOSCRIPT", "WRONGTYPE", "NOGROUP", ...).
std::string error_code(const redisReply* reply);
// An error reply that a retry can outlive (BUSY, LOADING, a full client table, OOM ...).
bool is_transient(const redisReply* reply);
// A field of a flat map reply ([name, value, name, value ...], as XINFO and CONFIG GET give).
const redisReply* field(const redisReply* map, std::string_view name);
// "<ms>-<seq>" as a pair; nullopt when malformed.
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_entry_id(std::string_view id);

class Connection {
 public:
  // Connects, authenticates and selects the database, each within `timeout`. Throws BrokerError
  // (retryable) when the server cannot be reached, ConfigError when it refuses the login.
  Connection(const Endpoint& endpoint, std::chrono::milliseconds timeout);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // One command, waiting for its reply (up to the timeout). Throws BrokerError when the
  // connection fails (the connection is then unusable); an error reply is returned, not thrown.
  Reply command(const std::vector<std::string_view>& args);
  // The same, throwing BrokerError (retryable) for an error reply too, with `what` before it.
  Reply checked(const std::vector<std::string_view>& args, const std::string& what);
  // Waits up to `timeout` for each later reply (SetTimeout).
  void set_timeout(std::chrono::milliseconds timeout);

  [[nodiscard]] redisContext* get() const { return context_; }
  [[nodiscard]] bool broken() const { return context_->err != 0; }
  [[nodiscard]] std::string error() const;

 private:
  // Throws when `reply` is an error: BrokerError (retryable) when transient, else ConfigError.
  void refused_unless_transient(const redisReply* reply, const std::string& what) const;

  redisContext* context_ = nullptr;
  Endpoint endpoint_;
};

// Throws ConfigError unless the server writes each change to its append-only file and fsyncs it
// before replying (appendonly yes, appendfsync always, no-appendfsync-on-rewrite no) or
// `allow_volatile` is set; says what to set. A transient error (BUSY ...) is a BrokerError. A
// server whose CONFIG command is disabled (managed services rename it) cannot be checked: refused
// in the same way, naming the flag.
void check_persistence(Connection& connection, bool allow_volatile, const std::string& flag);

// An event as a stream entry's fields, in order: event_id, aggregate_type, aggregate_id,
// aggregate_sequence, event_type, schema_version, occurred_at, headers (the event's JSON object),
// then payload.
// The fields and values are views into `event` and into `numbers` (which this fills: the id, the
// sequence and the schema version as text), so the payload is not copied on its way to hiredis.
using EntryNumbers = std::array<std::string, 3>;
std::vector<std::string_view> entry_fields(const Event& event, EntryNumbers& numbers);
// Back from an entry's field array ([name, value, ...]); a nil event_id when it has none valid.
ConsumedEvent decode_entry(const redisReply* fields);

}  // namespace outbox::redis
