#pragma once
// What the RabbitMQ sink, consumer and audit share over rabbitmq-c (librabbitmq): the URL, a
// connection opened with timeouts, one channel, AMQP tables built from C++ strings, and the
// library's errors as text.

#include <amqp.h>
#include <amqp_framing.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::rabbitmq {

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 5672;
  std::string user = "guest";
  std::string password = "guest";
  std::string vhost = "/";
};

// amqp://user:password@host:port/vhost ("/" or nothing after the port: the default vhost "/";
// %2f for a vhost that starts with a slash). Throws ConfigError for anything else, amqps://
// included (TLS is not built yet: a TLS-terminating proxy in front of the broker, or plain AMQP
// on a private network).
Endpoint parse_url(const std::string& url);

// "host:port/vhost", without the password.
std::string describe(const Endpoint& endpoint);

// The text of a rabbitmq-c status, or of an RPC reply (the server's reply code and text).
std::string status_text(int status);
std::string reply_text(const amqp_rpc_reply_t& reply);
// The AMQP reply code of a server exception (404 NOT_FOUND, 406 PRECONDITION_FAILED ...), or 0.
int reply_code(const amqp_rpc_reply_t& reply);

amqp_bytes_t bytes(std::string_view text);
std::string to_string(const amqp_bytes_t& bytes);

// An AMQP field table that owns its texts (rabbitmq-c's tables point into memory they don't own).
class Table {
 public:
  void add_text(const std::string& key, std::string value);
  void add_int64(const std::string& key, std::int64_t value);
  void add_bool(const std::string& key, bool value);
  void add_timestamp(const std::string& key, std::uint64_t seconds);
  void add_table(const std::string& key, Table& inner);
  [[nodiscard]] amqp_table_t get();  // valid while this Table lives and is not changed
  [[nodiscard]] bool empty() const { return entries_.empty(); }
  // About the bytes it takes on the wire (an upper bound for the kinds it holds).
  [[nodiscard]] std::size_t encoded_size() const { return encoded_size_; }

 private:
  std::vector<std::unique_ptr<std::string>> texts_;
  std::vector<amqp_table_entry_t> entries_;
  std::size_t encoded_size_ = 4;  // the table's length
  amqp_bytes_t keep(std::string text);
};

// The value of `key` in a received table as text (strings, integers, booleans), or "".
std::string table_text(const amqp_table_t& table, std::string_view key);

// One connection with channel 1 open. Every call that waits for the server gives up after
// `timeout`; heartbeats every `heartbeat` (0: none) so a dead broker is noticed on a quiet link.
class Connection {
 public:
  Connection(const Endpoint& endpoint, const std::string& name, std::chrono::milliseconds timeout,
             std::chrono::seconds heartbeat);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  [[nodiscard]] amqp_connection_state_t get() const { return state_; }
  static constexpr amqp_channel_t kChannel = 1;

  // Answers the server's channel.close (which has already arrived) and reopens the channel.
  void acknowledge_channel_close();
  // Answers the server's connection.close (which has already arrived): the connection is over.
  void acknowledge_connection_close();
  // Throws BrokerError (retryable) or ConfigError (`config`) with `what` and the reply's text
  // when `reply` is not normal; a channel the server closed is reopened first.
  void check(const amqp_rpc_reply_t& reply, const std::string& what, bool config = false);

 private:
  // Opens channel 1 again after the server closed it (a refused declare, a publish to a missing
  // exchange). Throws BrokerError when it cannot.
  void reopen_channel();

  amqp_connection_state_t state_ = nullptr;
  bool open_ = false;
};

}  // namespace outbox::rabbitmq
