#include "rabbitmq/amqp_common.hpp"

#include <amqp_tcp_socket.h>
#include <fmt/format.h>
#include <sys/time.h>

#include <cstring>

#include "common/printable.hpp"
#include "common/redact.hpp"
#include "outbox/error.hpp"

namespace outbox::rabbitmq {
namespace {

// True when the reply is the server closing the channel (so the channel is gone).
bool closes_channel(const amqp_rpc_reply_t& reply) {
  return reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
         reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD;
}

timeval to_timeval(std::chrono::milliseconds duration) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(duration.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((duration.count() % 1000) * 1000);
  return tv;
}

}  // namespace

Endpoint parse_url(const std::string& url) {
  if (url.starts_with("amqps://")) {
    throw ConfigError(
        "RabbitMQ: amqps:// (TLS) is not supported yet; use amqp:// on a private network or "
        "through a TLS-terminating proxy (stunnel, HAProxy) in front of the broker");
  }
  if (!url.starts_with("amqp://")) {
    throw ConfigError("RabbitMQ URL \"" + detail::printable(detail::redact_url_password(url), 200) +
                      "\" must look like amqp://user:password@host:5672/vhost");
  }
  if (const auto at = url.find('@');
      at != std::string::npos && url.substr(7, at - 7).find(':') == std::string::npos) {
    // rabbitmq-c would log in with the password "guest".
    throw ConfigError("RabbitMQ URL for user " + detail::printable(url.substr(7, at - 7), 100) +
                      " has no password: amqp://user:password@host:5672/vhost");
  }
  std::string copy = url;
  amqp_connection_info info{};
  if (amqp_parse_url(copy.data(), &info) != AMQP_STATUS_OK || info.host == nullptr ||
      *info.host == '\0') {
    throw ConfigError("RabbitMQ URL \"" + detail::printable(detail::redact_url_password(url), 200) +
                      "\" is malformed; e.g. amqp://guest:guest@127.0.0.1:5672/ (a password "
                      "with '@', ':' or '/' must be percent-encoded)");
  }
  Endpoint endpoint;
  endpoint.host = info.host;
  endpoint.port = info.port;
  endpoint.user = info.user != nullptr ? info.user : "guest";
  endpoint.password = info.password != nullptr ? info.password : "guest";
  // "amqp://host/" names the empty vhost by the letter of the AMQP URI spec, which no one means:
  // the default "/" as most clients take it.
  endpoint.vhost = info.vhost != nullptr && *info.vhost != '\0' ? info.vhost : "/";
  return endpoint;
}

std::string describe(const Endpoint& endpoint) {
  return fmt::format("{}:{}{}{}", endpoint.host, endpoint.port,
                     endpoint.vhost.starts_with('/') ? "" : "/", endpoint.vhost);
}

std::string status_text(int status) { return amqp_error_string2(status); }

std::string reply_text(const amqp_rpc_reply_t& reply) {
  switch (reply.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return "ok";
    case AMQP_RESPONSE_NONE:
      return "no reply";
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return status_text(reply.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const auto* close = static_cast<const amqp_channel_close_t*>(reply.reply.decoded);
        return fmt::format("the server closed the channel: {} {}", close->reply_code,
                           detail::printable(to_string(close->reply_text), 300));
      }
      if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const auto* close = static_cast<const amqp_connection_close_t*>(reply.reply.decoded);
        return fmt::format("the server closed the connection: {} {}", close->reply_code,
                           detail::printable(to_string(close->reply_text), 300));
      }
      return fmt::format("unexpected method 0x{:08x} from the server", reply.reply.id);
  }
  return "unknown reply";
}

int reply_code(const amqp_rpc_reply_t& reply) {
  if (reply.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION) return 0;
  if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    return static_cast<const amqp_channel_close_t*>(reply.reply.decoded)->reply_code;
  }
  if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    return static_cast<const amqp_connection_close_t*>(reply.reply.decoded)->reply_code;
  }
  return 0;
}

amqp_bytes_t bytes(std::string_view text) {
  return amqp_bytes_t{text.size(), const_cast<char*>(text.data())};
}

std::string to_string(const amqp_bytes_t& value) {
  return value.len == 0 ? std::string()
                        : std::string(static_cast<const char*>(value.bytes), value.len);
}

amqp_bytes_t Table::keep(std::string text) {
  encoded_size_ += text.size() + 5;  // a key's length byte, a value's kind and length
  texts_.push_back(std::make_unique<std::string>(std::move(text)));
  return bytes(*texts_.back());
}

void Table::add_text(const std::string& key, std::string value) {
  amqp_table_entry_t entry{};
  entry.key = keep(key);
  entry.value.kind = AMQP_FIELD_KIND_UTF8;
  entry.value.value.bytes = keep(std::move(value));
  entries_.push_back(entry);
}

void Table::add_int64(const std::string& key, std::int64_t value) {
  amqp_table_entry_t entry{};
  entry.key = keep(key);
  entry.value.kind = AMQP_FIELD_KIND_I64;
  encoded_size_ += 8;
  entry.value.value.i64 = value;
  entries_.push_back(entry);
}

void Table::add_bool(const std::string& key, bool value) {
  amqp_table_entry_t entry{};
  entry.key = keep(key);
  entry.value.kind = AMQP_FIELD_KIND_BOOLEAN;
  entry.value.value.boolean = value ? 1 : 0;
  entries_.push_back(entry);
}

void Table::add_timestamp(const std::string& key, std::uint64_t seconds) {
  amqp_table_entry_t entry{};
  entry.key = keep(key);
  entry.value.kind = AMQP_FIELD_KIND_TIMESTAMP;
  encoded_size_ += 8;
  entry.value.value.u64 = seconds;
  entries_.push_back(entry);
}

void Table::add_table(const std::string& key, Table& inner) {
  amqp_table_entry_t entry{};
  entry.key = keep(key);
  entry.value.kind = AMQP_FIELD_KIND_TABLE;
  entry.value.value.table = inner.get();
  encoded_size_ += inner.encoded_size();
  entries_.push_back(entry);
}

amqp_table_t Table::get() {
  return amqp_table_t{static_cast<int>(entries_.size()),
                      entries_.empty() ? nullptr : entries_.data()};
}

std::string table_text(const amqp_table_t& table, std::string_view key) {
  for (int i = 0; i < table.num_entries; ++i) {
    const amqp_table_entry_t& entry = table.entries[i];
    if (std::string_view(static_cast<const char*>(entry.key.bytes), entry.key.len) != key) continue;
    const amqp_field_value_t& value = entry.value;
    switch (value.kind) {
      case AMQP_FIELD_KIND_UTF8:
      case AMQP_FIELD_KIND_BYTES:
        return to_string(value.value.bytes);
      case AMQP_FIELD_KIND_I8:
        return std::to_string(value.value.i8);
      case AMQP_FIELD_KIND_I16:
        return std::to_string(value.value.i16);
      case AMQP_FIELD_KIND_I32:
        return std::to_string(value.value.i32);
      case AMQP_FIELD_KIND_I64:
        return std::to_string(value.value.i64);
      case AMQP_FIELD_KIND_U8:
        return std::to_string(value.value.u8);
      case AMQP_FIELD_KIND_U16:
        return std::to_string(value.value.u16);
      case AMQP_FIELD_KIND_U32:
        return std::to_string(value.value.u32);
      case AMQP_FIELD_KIND_U64:
      case AMQP_FIELD_KIND_TIMESTAMP:
        return std::to_string(value.value.u64);
      case AMQP_FIELD_KIND_BOOLEAN:
        return value.value.boolean ? "true" : "false";
      default:
        return {};
    }
  }
  return {};
}

Connection::Connection(const Endpoint& endpoint, const std::string& name,
                       std::chrono::milliseconds timeout, std::chrono::seconds heartbeat) {
  state_ = amqp_new_connection();
  if (state_ == nullptr) throw BrokerError("RabbitMQ: out of memory", 0, true);
  amqp_socket_t* socket = amqp_tcp_socket_new(state_);
  const timeval limit = to_timeval(timeout);
  if (socket == nullptr) {
    amqp_destroy_connection(state_);
    throw BrokerError("RabbitMQ: cannot make a socket", 0, true);
  }
  const int status = amqp_socket_open_noblock(socket, endpoint.host.c_str(), endpoint.port, &limit);
  if (status != AMQP_STATUS_OK) {
    amqp_destroy_connection(state_);
    throw BrokerError(
        fmt::format("RabbitMQ: cannot connect to {}: {}", describe(endpoint), status_text(status)),
        0, true);
  }
  amqp_set_handshake_timeout(state_, &limit);
  amqp_set_rpc_timeout(state_, &limit);
  // What outbox understands from the server: connection.blocked (a memory or disk alarm stops
  // publishers), basic.cancel (a consumer's queue deleted), an authentication failure said.
  Table capabilities;
  capabilities.add_bool("authentication_failure_close", true);
  capabilities.add_bool("connection.blocked", true);
  capabilities.add_bool("consumer_cancel_notify", true);
  capabilities.add_bool("publisher_confirms", true);
  Table properties;
  properties.add_text("connection_name", name);
  properties.add_text("product", "outbox");
  properties.add_table("capabilities", capabilities);
  const amqp_table_t table = properties.get();
  const amqp_rpc_reply_t login = amqp_login_with_properties(
      state_, endpoint.vhost.c_str(), 0, AMQP_DEFAULT_FRAME_SIZE,
      static_cast<int>(heartbeat.count()), &table, AMQP_SASL_METHOD_PLAIN, endpoint.user.c_str(),
      endpoint.password.c_str());
  if (login.reply_type != AMQP_RESPONSE_NORMAL) {
    const std::string text = reply_text(login);
    const int code = reply_code(login);
    amqp_destroy_connection(state_);
    const std::string message = fmt::format("RabbitMQ: cannot log in to {} as {}: {}",
                                            describe(endpoint), endpoint.user, text);
    // 403 ACCESS_REFUSED (a wrong password, a vhost the user may not use), 530 NOT_ALLOWED (no
    // such vhost): no retry of ours fixes them.
    if (code == AMQP_ACCESS_REFUSED || code == AMQP_NOT_ALLOWED) throw ConfigError(message);
    throw BrokerError(message, 0, true);
  }
  open_ = true;
  amqp_channel_open(state_, kChannel);
  const amqp_rpc_reply_t opened = amqp_get_rpc_reply(state_);
  if (opened.reply_type != AMQP_RESPONSE_NORMAL) {
    const std::string text = reply_text(opened);
    amqp_destroy_connection(state_);  // the destructor does not run for a throwing constructor
    throw BrokerError("RabbitMQ: cannot open a channel: " + text, 0, true);
  }
}

Connection::~Connection() {
  if (state_ == nullptr) return;
  if (open_) {
    // A short wait: a broker that went away must not hold a relay that is stopping.
    const timeval limit = to_timeval(std::chrono::milliseconds(500));
    amqp_set_rpc_timeout(state_, &limit);
    amqp_connection_close(state_, AMQP_REPLY_SUCCESS);
  }
  amqp_destroy_connection(state_);
}

void Connection::acknowledge_connection_close() {
  amqp_connection_close_ok_t ok{};
  amqp_send_method(state_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
  open_ = false;  // nothing more to say: the destructor only frees
}

void Connection::acknowledge_channel_close() {
  amqp_channel_close_ok_t ok{};
  amqp_send_method(state_, kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  reopen_channel();
}

void Connection::reopen_channel() {
  amqp_channel_open(state_, kChannel);
  const amqp_rpc_reply_t opened = amqp_get_rpc_reply(state_);
  if (opened.reply_type != AMQP_RESPONSE_NORMAL) {
    open_ = opened.reply_type != AMQP_RESPONSE_LIBRARY_EXCEPTION;
    throw BrokerError("RabbitMQ: cannot open a channel again: " + reply_text(opened), 0, true);
  }
}

void Connection::check(const amqp_rpc_reply_t& reply, const std::string& what, bool config) {
  if (reply.reply_type == AMQP_RESPONSE_NORMAL) return;
  const std::string message = "RabbitMQ: " + what + ": " + reply_text(reply);
  if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) open_ = false;
  if (reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
      reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    acknowledge_connection_close();
  }
  if (closes_channel(reply)) acknowledge_channel_close();
  if (config && reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) throw ConfigError(message);
  throw BrokerError(message, 0, true);
}

}  // namespace outbox::rabbitmq
