#include "redis/redis_common.hpp"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "common/printable.hpp"
#include "common/redact.hpp"
#include "outbox/error.hpp"

namespace outbox::redis {
namespace {

std::string percent_decode(std::string_view text, const std::string& url) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= text.size() ||
        std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16).ptr !=
            text.data() + i + 3) {
      throw ConfigError("Redis URL \"" + detail::printable(detail::redact_url_password(url), 200) +
                        "\" has a malformed percent-encoding");
    }
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

template <typename Int>
bool to_int(std::string_view text, Int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty();
}

timeval to_timeval(std::chrono::milliseconds duration) {
  const auto ms = std::max<std::int64_t>(duration.count(), 1);
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

}  // namespace

Endpoint parse_url(const std::string& url) {
  if (url.starts_with("rediss://")) {
    throw ConfigError(
        "Redis: rediss:// (TLS) is not supported (hiredis 0.14 has no TLS); use redis:// on a "
        "private network or through a TLS-terminating proxy (stunnel, HAProxy)");
  }
  const auto malformed = [&url] {
    return ConfigError("Redis URL \"" + detail::printable(detail::redact_url_password(url), 200) +
                       "\" must look like redis://[[user]:password@]host[:port][/db], e.g. "
                       "redis://127.0.0.1:6379/0 (a password with '@', ':' or '/' "
                       "percent-encoded)");
  };
  if (!url.starts_with("redis://")) throw malformed();
  std::string_view rest = std::string_view(url).substr(8);
  Endpoint endpoint;
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = rest.substr(0, at);
    const auto colon = credentials.find(':');
    if (colon == std::string_view::npos) throw malformed();
    endpoint.user = percent_decode(credentials.substr(0, colon), url);
    endpoint.password = percent_decode(credentials.substr(colon + 1), url);
    if (endpoint.password.empty()) throw malformed();
    rest = rest.substr(at + 1);
  }
  std::string_view host_port = rest;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    host_port = rest.substr(0, slash);
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!to_int(db, endpoint.db) || endpoint.db < 0)) throw malformed();
  }
  if (const auto colon = host_port.rfind(':'); colon != std::string_view::npos) {
    if (!to_int(host_port.substr(colon + 1), endpoint.port) || endpoint.port < 1 ||
        endpoint.port > 65535) {
      throw malformed();
    }
    host_port = host_port.substr(0, colon);
  }
  if (host_port.empty() || host_port.find_first_of("?#[]") != std::string_view::npos) {
    throw malformed();
  }
  endpoint.host = std::string(host_port);
  return endpoint;
}

std::string describe(const Endpoint& endpoint) {
  return fmt::format("{}:{}/{}", endpoint.host, endpoint.port, endpoint.db);
}

std::string text(const redisReply* reply) {
  if (reply == nullptr) return {};
  switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(reply->str, reply->len);
    default:
      return {};
  }
}

bool is_error(const redisReply* reply) {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR;
}

std::string error_code(const redisReply* reply) {
  if (!is_error(reply)) return {};
  const std::string message = text(reply);
  return message.substr(0, message.find(' '));
}

const redisReply* field(const redisReply* map, std::string_view name) {
  if (map == nullptr || map->type != REDIS_REPLY_ARRAY) return nullptr;
  for (std::size_t i = 0; i + 1 < map->elements; i += 2) {
    if (text(map->element[i]) == name) return map->element[i + 1];
  }
  return nullptr;
}

bool is_transient(const redisReply* reply) {
  const std::string code = error_code(reply);
  const std::string message = text(reply);
  // A busy server (a long script), one still loading its data, a failover under way, a full
  // client table: the same request succeeds later. Everything else (a wrong password, NOPERM,
  // an unknown command, a database out of range) needs an operator.
  return code == "BUSY" || code == "LOADING" || code == "MASTERDOWN" || code == "TRYAGAIN" ||
         code == "OOM" || message.find("max number of clients") != std::string::npos;
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_entry_id(std::string_view id) {
  const auto dash = id.find('-');
  std::pair<std::uint64_t, std::uint64_t> parsed{};
  if (dash == std::string_view::npos || !to_int(id.substr(0, dash), parsed.first) ||
      !to_int(id.substr(dash + 1), parsed.second)) {
    return std::nullopt;
  }
  return parsed;
}

Connection::Connection(const Endpoint& endpoint, std::chrono::milliseconds timeout)
    : endpoint_(endpoint) {
  context_ = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, to_timeval(timeout));
  if (context_ == nullptr) throw std::bad_alloc();
  try {
    if (context_->err != 0) {
      throw BrokerError("Redis: cannot connect to " + describe(endpoint) + ": " + context_->errstr,
                        0, true);
    }
    set_timeout(timeout);
    if (!endpoint.password.empty()) {
      std::vector<std::string_view> auth{"AUTH"};
      if (!endpoint.user.empty()) auth.emplace_back(endpoint.user);
      auth.emplace_back(endpoint.password);
      refused_unless_transient(command(auth).get(), "refused the login");
    }
    if (endpoint.db != 0) {
      const std::string db = std::to_string(endpoint.db);
      refused_unless_transient(command({"SELECT", db}).get(), "refused database " + db);
    }
  } catch (...) {
    redisFree(context_);  // no destructor runs for a constructor that throws
    throw;
  }
}

void Connection::refused_unless_transient(const redisReply* reply, const std::string& what) const {
  if (!is_error(reply)) return;
  const std::string message =
      "Redis at " + describe(endpoint_) + " " + what + ": " + detail::printable(text(reply), 200);
  if (is_transient(reply)) throw BrokerError(message, 0, true);
  throw ConfigError(message);
}

Connection::~Connection() { redisFree(context_); }

Reply Connection::command(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (const std::string_view arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (reply == nullptr) {
    throw BrokerError("Redis at " + describe(endpoint_) + ": " + error(), 0, true);
  }
  return Reply(reply);
}

Reply Connection::checked(const std::vector<std::string_view>& args, const std::string& what) {
  Reply reply = command(args);
  if (is_error(reply.get())) {
    throw BrokerError("Redis: " + what + ": " + detail::printable(text(reply.get()), 300), 0, true);
  }
  return reply;
}

void Connection::set_timeout(std::chrono::milliseconds timeout) {
  redisSetTimeout(context_, to_timeval(timeout));
}

std::string Connection::error() const {
  return context_->err != 0 ? std::string(context_->errstr) : std::string("no reply");
}

void check_persistence(Connection& connection, bool allow_volatile, const std::string& flag) {
  if (allow_volatile) return;
  const Reply reply = connection.command(
      {"CONFIG", "GET", "appendonly", "appendfsync", "no-appendfsync-on-rewrite"});
  if (is_transient(reply.get())) {
    throw BrokerError("Redis: CONFIG GET: " + detail::printable(text(reply.get()), 200), 0, true);
  }
  if (is_error(reply.get())) {
    throw ConfigError(fmt::format(
        "Redis: cannot read the server's persistence settings (CONFIG GET: {}), so an "
        "acknowledged append cannot be known to survive a crash; enable CONFIG for this user, "
        "or pass {} to accept acknowledgements that a crash can undo",
        detail::printable(text(reply.get()), 200), flag));
  }
  const std::string appendonly = text(field(reply.get(), "appendonly"));
  const std::string appendfsync = text(field(reply.get(), "appendfsync"));
  if (text(field(reply.get(), "no-appendfsync-on-rewrite")) == "yes") {
    throw ConfigError(fmt::format(
        "Redis: the server has no-appendfsync-on-rewrite yes: while it rewrites its AOF or saves "
        "a snapshot it replies without fsyncing, and a crash then can lose entries it "
        "acknowledged; set no-appendfsync-on-rewrite no (CONFIG SET, and in redis.conf), or pass "
        "{} to accept that",
        flag));
  }
  if (appendonly != "yes" || appendfsync != "always") {
    throw ConfigError(fmt::format(
        "Redis: the server has appendonly {} and appendfsync {}: a crash can lose entries it "
        "acknowledged (the relay would have marked them published); set appendonly yes and "
        "appendfsync always (CONFIG SET appendonly yes; CONFIG SET appendfsync always; and in "
        "redis.conf), or pass {} to accept that",
        appendonly.empty() ? "?" : appendonly, appendfsync.empty() ? "?" : appendfsync, flag));
  }
}

std::vector<std::string_view> entry_fields(const Event& event, EntryNumbers& numbers) {
  numbers = {event.event_id.to_string(), std::to_string(event.aggregate_sequence),
             std::to_string(event.schema_version)};
  // Not `empty() ? "{}" : headers`: its common type is a std::string, a temporary the view
  // would outlive.
  std::string_view headers = event.headers;
  if (headers.empty()) headers = "{}";
  return {"event_id",
          numbers[0],
          "aggregate_type",
          event.aggregate_type,
          "aggregate_id",
          event.aggregate_id,
          "aggregate_sequence",
          numbers[1],
          "event_type",
          event.event_type,
          "schema_version",
          numbers[2],
          "occurred_at",
          event.occurred_at,
          "headers",
          headers,
          "payload",
          event.payload};
}

ConsumedEvent decode_entry(const redisReply* fields) {
  ConsumedEvent event;
  const auto value = [fields](std::string_view name) { return text(field(fields, name)); };
  event.event_id = EventId::parse(value("event_id")).value_or(EventId{});
  event.aggregate_type = value("aggregate_type");
  event.aggregate_id = value("aggregate_id");
  to_int(value("aggregate_sequence"), event.aggregate_sequence);
  event.event_type = value("event_type");
  to_int(value("schema_version"), event.schema_version);
  event.payload = value("payload");
  const auto headers = nlohmann::json::parse(value("headers"), nullptr, false);
  if (headers.is_object()) {
    if (const auto it = headers.find("traceparent"); it != headers.end() && it->is_string()) {
      event.traceparent = it->get<std::string>();
    }
  }
  event.partition = -1;
  return event;
}

}  // namespace outbox::redis
