#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "observe/admin_page.hpp"
#include "observe/guarded_server.hpp"
#include "observe/metric_families.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/observe.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/status.hpp"
#include "pg/connection.hpp"

namespace outbox {

bool ListenAddress::loopback() const {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

ListenAddress parse_listen_address(const std::string& text, const std::string& what) {
  const auto refuse = [&](const std::string& why) {
    return ConfigError(
        fmt::format("{} '{}': {}; give host:port, e.g. 127.0.0.1:9464 or "
                    "[::1]:9464",
                    what, text, why));
  };
  ListenAddress address;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw refuse("an IPv6 host needs [brackets] and a :port after them");
    }
    address.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) throw refuse("no port");
    address.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (address.host.find(':') != std::string::npos) {
      throw refuse("an IPv6 host needs [brackets]");
    }
  }
  if (address.host.empty()) throw refuse("no host (0.0.0.0 listens on every interface)");
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || value > 65535) {
    throw refuse("the port is not a number from 0 to 65535");
  }
  address.port = static_cast<std::uint16_t>(value);
  return address;
}

namespace {

constexpr std::size_t kMinTokenLength = 16;
constexpr std::size_t kMaxBacklogTypes = kMaxAggregateTypeLabels;

// Compares without stopping at the first difference (no timing hint about the token).
bool same_token(std::string_view given, std::string_view expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  }
  return diff == 0;
}

}  // namespace

// An admin action refused for want of a token (403), and a request refused while another holds
// the admin connection (503).
struct Forbidden : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Busy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ObserveServer::Impl {
 public:
  explicit Impl(ObserveOptions options) : options_(std::move(options)) {
    address_ = parse_listen_address(options_.listen, "the metrics listen address");
    if (!options_.token.empty() && options_.token.size() < kMinTokenLength) {
      throw ConfigError(
          fmt::format("the admin token is {} characters; use at least {} (e.g. "
                      "openssl rand -hex 32)",
                      options_.token.size(), kMinTokenLength));
    }
    if (!address_.loopback() && options_.token.empty()) {
      throw ConfigError(fmt::format(
          "the metrics listen address {} is not loopback: anyone who reaches it could read the "
          "metrics; give a token (--admin-token-file) or listen on 127.0.0.1",
          options_.listen));
    }
    // A ConfigError, as for every option here.
    if (std::string problem =
            duration_range_problem(options_.backlog_refresh, std::chrono::milliseconds(100),
                                   std::chrono::hours(1), "a backlog refresh (--backlog-refresh)",
                                   "a slow query also waits ten times as long as it took");
        !problem.empty()) {
      throw ConfigError(problem);
    }
  }

  ~Impl() {
    stop();
    if (cancel_ != nullptr) PQfreeCancel(cancel_);
  }

  void watch_relay(const Relay& relay, std::string shard) {
    relays_.emplace_back(&relay, std::move(shard));
  }
  void watch_consumer(std::string consumer, std::function<KafkaConsumerStats()> stats) {
    consumers_.emplace_back(std::move(consumer), std::move(stats));
  }

  void start() {
    if (thread_.joinable()) return;
    // One request per connection within observe::kListenerLimits (guarded_server.hpp): slow
    // clients are cut at a deadline or evicted by new ones, never queued, so they cannot starve
    // the scrapes, hold up stop(), or use up the process's descriptors.
    server_.set_payload_max_length(64 * 1024);
    // Not httplib's default SO_REUSEPORT: a second process on the same port must fail to start,
    // not share the scrapes with the first.
    server_.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    server_.set_request_check([this](const httplib::Request& request, httplib::Response& response) {
      // On loopback refuse a Host that names another site, so a web page cannot reach the
      // listener by DNS rebinding (its name resolving to 127.0.0.1): with a token too, as the
      // probes need none and there name what failed (health()).
      if (address_.loopback() && !loopback_host(request.get_header_value("Host"))) {
        response.status = 403;
        response.set_content("this listener answers only to loopback host names\n", "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      }
      // Only the admin actions take a body; anything else with another method is answered
      // before httplib reads a body (which a client could trickle).
      if (request.method != "GET" && request.method != "HEAD" &&
          !(request.method == "POST" && request.path.starts_with("/api/quarantine/"))) {
        response.status = 405;
        response.set_header("Allow", "GET, HEAD");
        response.set_header("Connection", "close");
        response.set_content("method not allowed\n", "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      }
      // The page holds no data (its script asks for the token): it and the probes need none.
      if (options_.token.empty() || request.path == "/healthz" || request.path == "/readyz" ||
          request.path == "/") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      const std::string header = request.get_header_value("Authorization");
      constexpr std::string_view kBearer = "Bearer ";
      if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0 &&
          same_token(std::string_view(header).substr(kBearer.size()), options_.token)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      response.status = 401;
      response.set_header("WWW-Authenticate", "Bearer");
      response.set_content("a bearer token is required (Authorization: Bearer <token>)\n",
                           "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    });
    if (options_.backlog) add_admin_routes();
    server_.Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
      const auto [ok, body] = health(false);
      response.status = ok ? 200 : 503;
      response.set_content(body, "text/plain");
    });
    server_.Get("/readyz", [this](const httplib::Request&, httplib::Response& response) {
      const auto [ok, body] = health(true);
      response.status = ok ? 200 : 503;
      response.set_content(body, "text/plain");
    });
    const bool bound = address_.port == 0
                           ? (bound_port_ = server_.bind_to_any_port(address_.host)) > 0
                           : server_.bind_to_port(address_.host, address_.port);
    if (!bound) {
      throw ConfigError(fmt::format(
          "cannot listen on {}: the port is in use or the address is not this host's; choose "
          "another",
          options_.listen));
    }
    if (address_.port != 0) bound_port_ = address_.port;
    server_.widen_backlog(128);  // a failure leaves httplib's 5: slower under a burst, no more
    if (options_.backlog) {
      backlog_thread_ = std::thread([this] { refresh_backlog_until_stopped(); });
      std::lock_guard lock(backlog_mutex_);
      backlog_started_ = true;  // what refresh_backlog() reads, not the thread object
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // httplib's stop() does nothing before the accept loop runs: wait for it, so a stop() right
    // after start() cannot leave the loop (and our join) running for ever.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    detail::log().info("serving /metrics, /healthz and /readyz on {}:{}", address_.host,
                       bound_port_);
  }

  void stop() noexcept {
    if (backlog_thread_.joinable()) {
      {
        std::lock_guard lock(backlog_mutex_);
        stopping_ = true;
        // A run in progress (up to its 30 s timeout, longer while the network is cut) would
        // hold the join, and a systemd stop, that long. Only then: a cancel opens a connection
        // of its own, which an idle thread's stop must not wait for.
        if (querying_ && cancel_ != nullptr) {
          char error[256];
          PQcancel(cancel_, error, sizeof(error));
        }
      }
      backlog_wake_.notify_all();
      backlog_thread_.join();
    }
    if (!thread_.joinable()) return;
    server_.stop_now();  // closes slow clients' connections instead of waiting for them
    thread_.join();
  }

  std::uint16_t port() const { return static_cast<std::uint16_t>(bound_port_); }

  // The admin page and its API (docs/OPERATIONS.md, "Admin page"). A POST must carry the
  // X-Outbox-Admin header and a JSON body: a form or image on another site can send neither
  // (a cross-site request with a custom header needs a CORS preflight, which nothing here
  // answers), so no other page can release or skip an event through a browser.
  void add_admin_routes() {
    server_.Get("/", [](const httplib::Request&, httplib::Response& response) {
      response.set_header("Content-Security-Policy",
                          "default-src 'none'; script-src 'unsafe-inline'; "
                          "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'");
      response.set_header("X-Frame-Options", "DENY");
      response.set_content(observe::kAdminPage, "text/html; charset=utf-8");
    });
    server_.Get("/api/overview", [this](const httplib::Request&, httplib::Response& response) {
      answer(response, [&] { return overview(); });
    });
    server_.Post("/api/quarantine/retry",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   server_.handling();
                   answer(response, [&] {
                     const auto [id, body] = admin_post(request);
                     std::lock_guard lock(api_mutex_);
                     const std::vector<EventId> ids{id};
                     const std::size_t released =
                         retry_quarantined(api_connection(), options_.schema, ids, actor(request));
                     return nlohmann::json{{"released", released}};
                   });
                 });
    server_.Post("/api/quarantine/skip", [this](const httplib::Request& request,
                                                httplib::Response& response) {
      server_.handling();
      answer(response, [&] {
        const auto [id, body] = admin_post(request);
        const std::string reason = body.value("reason", std::string());
        if (reason.empty() || reason.size() > 2000) {
          throw InvalidArgument("skip needs a reason (at most 2000 bytes)");
        }
        std::lock_guard lock(api_mutex_);
        skip_quarantined(api_connection(), options_.schema, id, actor(request), reason);
        return nlohmann::json{{"skipped", id.to_string()}};
      });
    });
  }

  // Runs `make`; its JSON is the answer, an InvalidArgument a 400, anything else a 503.
  template <typename Make>
  void answer(httplib::Response& response, Make make) {
    nlohmann::json body;
    try {
      body = make();
    } catch (const Forbidden& error) {
      response.status = 403;
      body = {{"error", error.what()}};
    } catch (const Busy& error) {
      response.status = 503;
      body = {{"error", error.what()}};
    } catch (const InvalidArgument& error) {
      response.status = 400;
      body = {{"error", error.what()}};
    } catch (const std::exception& error) {
      response.status = 503;
      body = {{"error", error.what()}};
      std::lock_guard lock(api_mutex_);
      api_connection_.reset();
    }
    response.set_header("Cache-Control", "no-store");
    response.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                         "application/json");
  }

  // A POST's event id and body, after the checks that keep other sites out.
  std::pair<EventId, nlohmann::json> admin_post(const httplib::Request& request) const {
    if (options_.token.empty()) {
      // Read-only without a token: on loopback any local user could otherwise skip events
      // without the database credentials the same action needs from the command line.
      throw Forbidden(
          "actions (retry, skip) need a token: start with --admin-token-file; "
          "without one the page is read-only (outbox quarantine does the same)");
    }
    if (request.get_header_value("X-Outbox-Admin") != "1" ||
        request.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
      throw InvalidArgument("an admin action needs the header X-Outbox-Admin: 1 and a JSON body");
    }
    nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
    if (!body.is_object() || !body.contains("event_id") || !body["event_id"].is_string()) {
      throw InvalidArgument("the body must be a JSON object with an event_id");
    }
    const auto id = EventId::parse(body["event_id"].get<std::string>());
    if (!id) throw InvalidArgument("event_id is not a UUID");
    return {*id, std::move(body)};
  }

  static std::string actor(const httplib::Request& request) {
    return "admin page (" + request.remote_addr + ")";
  }

  bool loopback_host(const std::string& host_header) const {
    std::string host = host_header;
    if (!host.empty() && host.front() == '[') {
      host = host.substr(1, host.find(']') - 1);
    } else if (const auto colon = host.rfind(':'); colon != std::string::npos) {
      host = host.substr(0, colon);
    }
    if (host.empty()) return true;  // HTTP/1.0 without Host: not a browser
    return ListenAddress{host, 0}.loopback() || host == address_.host;
  }

  PGconn* api_connection() {
    if (!api_connection_ || !api_connection_->healthy()) {
      api_connection_.reset();
      api_connection_ = std::make_unique<pg::Connection>(pg::Connection::open(
          options_.database_url, "outbox-admin-page", {{"connect_timeout", "5"}}));
      pg::exec(api_connection_->get(), "SET statement_timeout = 10000");
    }
    return api_connection_->get();
  }

  nlohmann::json overview() {
    nlohmann::json out = {{"schema", options_.schema.name()}};
    {
      std::lock_guard lock(backlog_mutex_);
      out["backlog_ok"] = backlog_ok_;
      nlohmann::json backlog = nlohmann::json::array();
      for (const observe::BacklogRow& row : backlog_) {
        backlog.push_back({{"aggregate_type", row.aggregate_type},
                           {"pending", row.pending},
                           {"oldest_pending_age", row.oldest_pending_age},
                           {"quarantined", row.quarantined}});
      }
      out["backlog"] = std::move(backlog);
    }
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& [relay, shard] : relays_) {
      const RelayStats s = relay->stats();
      parts.push_back({{"part", "relay " + relay->relay_id() + " (this process)"},
                       {"state", to_string(s.health)},
                       {"detail", s.last_error}});
    }
    for (const auto& [name, stats] : consumers_) {
      const KafkaConsumerStats s = stats();
      parts.push_back({{"part", "consumer " + name + " (this process)"},
                       {"state", to_string(s.health)},
                       {"detail", s.last_error}});
    }
    // One overview at a time; another asked meanwhile is told to come back rather than queue
    // (queued requests would hold the HTTP workers the probes and scrapes need).
    std::unique_lock lock(api_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) throw Busy("the previous overview is still being read; try again");
    PGconn* conn = api_connection();
    // Every relay session the table knows: alive ones beat every 10 s.
    for (const RelaySessionStatus& relay : read_relay_sessions(conn, options_.schema, 50)) {
      parts.push_back(
          {{"part", "relay " + relay.relay_id},
           {"state", std::string(relay.state())},
           {"detail", relay.ended ? std::string()
                                  : fmt::format("seen {:.0f} s ago", relay.seen_seconds_ago)}});
    }
    out["parts"] = std::move(parts);
    nlohmann::json quarantine = nlohmann::json::array();
    for (const QuarantinedEvent& q : list_quarantined(conn, options_.schema, 100)) {
      quarantine.push_back({{"event_id", q.event_id.to_string()},
                            {"aggregate_type", q.aggregate_type},
                            {"aggregate_id", q.aggregate_id},
                            {"aggregate_sequence", q.aggregate_sequence},
                            {"event_type", q.event_type},
                            {"reason", q.reason},
                            {"last_error", q.last_error},
                            {"quarantined_at", q.quarantined_at},
                            {"blocked_events", q.blocked_events}});
    }
    out["quarantine"] = std::move(quarantine);
    // The backlog thread's list (the page costs no second pass over the pending rows).
    nlohmann::json slow = nlohmann::json::array();
    {
      std::lock_guard backlog_lock(backlog_mutex_);
      for (const observe::SlowAggregate& a : slowest_) {
        slow.push_back({{"aggregate_type", a.aggregate_type},
                        {"aggregate_id", a.aggregate_id},
                        {"pending", a.pending},
                        {"waiting_age", a.waiting_age}});
      }
    }
    out["slowest"] = std::move(slow);
    return out;
  }

  std::string metrics_text() {
    observe::Families families;
    observe::add_build_info(families);
    for (const auto& [relay, shard] : relays_) {
      observe::add_relay(families, relay->metrics(), shard);
    }
    for (const auto& [name, stats] : consumers_) observe::add_consumer(families, name, stats());
    if (options_.backlog) {
      std::lock_guard lock(backlog_mutex_);
      observe::add_backlog_up(families, backlog_ok_, last_query_seconds_);
      if (backlog_ok_) observe::add_backlog(families, backlog_);
    }
    return observe::serialize(families);
  }

 private:
  // (ok, body). Live: nothing stopped. Ready: everything running; with nothing watched, the
  // backlog query works.
  std::pair<bool, std::string> health(bool ready) {
    bool ok = true;
    std::string body;
    const auto check = [&](const std::string& part, Health state, const std::string& error) {
      const bool part_ok = ready ? state == Health::running : state != Health::stopped;
      ok = ok && part_ok;
      body += fmt::format("{}: {}", part, to_string(state));
      // The error may name hosts: only behind the token, or on loopback.
      if (!part_ok && !error.empty()) body += " (" + error + ")";
      body += "\n";
    };
    for (const auto& [relay, shard] : relays_) {
      const RelayStats s = relay->stats();
      check("relay " + relay->relay_id(), s.health, s.last_error);
    }
    for (const auto& [name, stats] : consumers_) {
      const KafkaConsumerStats s = stats();
      check("consumer " + name, s.health, s.last_error);
    }
    if (relays_.empty() && consumers_.empty() && options_.backlog) {
      std::lock_guard lock(backlog_mutex_);
      if (ready && !backlog_ok_) ok = false;
      body += backlog_ok_ ? "database: reachable\n" : "database: " + backlog_error_ + "\n";
    }
    if (!options_.token.empty() && !address_.loopback()) {
      // Unauthenticated callers reach these: states only.
      body = ok ? "ok\n" : "not ok\n";
    }
    return {ok, body.empty() ? "ok\n" : body};
  }

  // The backlog gauges and the slowest aggregates, from one query on a thread of its own, so a
  // scrape never waits for it. The query reads every pending row (seconds at a million,
  // docs/OPERATIONS.md), so the next run waits next_backlog_query(). A query that fails or passes
  // its 30 s timeout leaves the gauges out (absent, never stale) and outbox_backlog_query_up 0
  // until one works again.
  void refresh_backlog_until_stopped() {
    std::unique_lock lock(backlog_mutex_);
    bool announced = false;  // that the query is slow
    while (!stopping_) {
      const std::uint64_t run = ++runs_begun_;
      refresh_asked_ = false;
      lock.unlock();
      Backlog fresh;
      std::string error;
      std::chrono::steady_clock::duration took{};
      try {
        fresh = query_backlog(took);
      } catch (const std::exception& e) {
        error = e.what();
        set_cancel(nullptr);
        connection_.reset();
      }
      lock.lock();
      if (stopping_) break;  // a run stop() cancelled is no failure to report
      last_query_seconds_ = std::chrono::duration<double>(took).count();
      if (error.empty()) {
        if (!backlog_ok_ && !backlog_error_.empty()) {
          detail::log().info("metrics: the backlog query works again");
        }
        // Types seen before and gone now read 0 (not absent), while there is room.
        std::map<std::string, observe::BacklogRow> rows;
        for (observe::BacklogRow& row : fresh.rows) {
          rows.emplace(row.aggregate_type, std::move(row));
        }
        for (const observe::BacklogRow& before : backlog_) {
          if (rows.size() >= kMaxBacklogTypes + 1) break;
          rows.try_emplace(before.aggregate_type,
                           observe::BacklogRow{before.aggregate_type, 0, 0, 0});
        }
        backlog_.clear();
        for (auto& [type, row] : rows) backlog_.push_back(std::move(row));
        slowest_ = std::move(fresh.slowest);
        backlog_ok_ = true;
        backlog_error_.clear();
      } else {
        if (backlog_ok_ || backlog_error_.empty()) {
          detail::log().warn(
              "metrics: the backlog query failed (its gauges are left out until "
              "it works): {}",
              error);
        }
        backlog_ok_ = false;
        backlog_error_ = error;
        slowest_.clear();
      }
      const auto wait = observe::next_backlog_query(options_.backlog_refresh, took);
      if (!announced && wait > options_.backlog_refresh && took >= std::chrono::seconds(1)) {
        announced = true;
        detail::log().info(
            "metrics: the backlog query took {:.1f} s; it runs every {:.0f} s while it is that "
            "slow (ten times its duration)",
            last_query_seconds_, std::chrono::duration<double>(wait).count());
      } else if (announced && wait <= options_.backlog_refresh) {
        announced = false;
        detail::log().info("metrics: the backlog query is quick again; it runs every {} ms",
                           options_.backlog_refresh.count());
      }
      runs_done_ = run;
      backlog_done_.notify_all();
      // A refresh asked for runs early, but never inside the stretch.
      const auto floor = std::min(wait, observe::earliest_asked_backlog_query(took));
      backlog_wake_.wait_for(lock, floor, [this] { return stopping_; });
      backlog_wake_.wait_for(lock, wait - floor, [this] { return stopping_ || refresh_asked_; });
    }
    backlog_done_.notify_all();  // refresh_backlog() callers: stopping
  }

 public:
  // Asks for a run now (or once the last run's stretch is over: earliest_asked_backlog_query) and
  // waits up to `timeout` for one that began after the call.
  bool refresh_backlog(std::chrono::milliseconds timeout) {
    std::unique_lock lock(backlog_mutex_);
    if (!backlog_started_ || stopping_) return false;
    const std::uint64_t need = runs_begun_ + 1;
    refresh_asked_ = true;
    backlog_wake_.notify_all();
    return backlog_done_.wait_for(lock, timeout, [&] { return stopping_ || runs_done_ >= need; }) &&
           !stopping_;
  }

 private:
  // What stop() cancels with: the backlog connection's, replaced under the lock stop() takes.
  void set_cancel(PGconn* conn) {
    std::lock_guard lock(backlog_mutex_);
    if (cancel_ != nullptr) PQfreeCancel(cancel_);
    cancel_ = conn != nullptr ? PQgetCancel(conn) : nullptr;
  }

  // Brackets the query, so that stop() cancels only a query that runs, and none starts once it
  // was asked to stop (false).
  bool begin_query() {
    std::lock_guard lock(backlog_mutex_);
    if (stopping_) return false;
    querying_ = true;
    return true;
  }
  void end_query() {
    std::lock_guard lock(backlog_mutex_);
    querying_ = false;
  }

  struct Backlog {
    std::vector<observe::BacklogRow> rows;
    std::vector<observe::SlowAggregate> slowest;
  };

  // One run of the backlog query (this thread's connection). The first kMaxBacklogTypes types
  // by pending count, the rest together under kOtherAggregateTypes; then the slowest aggregates.
  // `took` is how long the query ran, also when it failed (a timeout was that slow). Nothing
  // when stopping.
  Backlog query_backlog(std::chrono::steady_clock::duration& took) {
    if (!connection_ || !connection_->healthy()) {
      set_cancel(nullptr);
      connection_.reset();
      connection_ = std::make_unique<pg::Connection>(pg::Connection::open(
          options_.database_url, "outbox-metrics", {{"connect_timeout", "5"}}));
      set_cancel(connection_->get());
      // No JIT: it compiled this query anew on every run (0.17 s of 2.4 s at a million rows).
      pg::exec(connection_->get(), "SET statement_timeout = 30000");
      pg::exec(connection_->get(), "SET jit = off");
    }
    // Timed without the connection: a server that is down must not stretch the wait.
    const auto began = std::chrono::steady_clock::now();
    const auto timed = [&] { took = std::chrono::steady_clock::now() - began; };
    if (!begin_query()) return {};
    pg::Result result = [&] {
      try {
        pg::Result r = pg::exec(connection_->get(), backlog_sql());
        timed();
        end_query();
        return r;
      } catch (...) {
        timed();  // a statement timeout counts: it was that slow
        end_query();
        throw;
      }
    }();
    Backlog backlog;
    std::vector<observe::BacklogRow> by_type;
    for (int i = 0; i < result.rows(); ++i) {
      if (result.text(i, 0) == "slow") {
        backlog.slowest.push_back({std::string(result.text(i, 1)), std::string(result.text(i, 2)),
                                   result.int64(i, 3), std::stod(std::string(result.text(i, 4)))});
      } else {
        by_type.push_back(
            {std::string(result.text(i, 1)), std::stod(std::string(result.text(i, 3))),
             std::stod(std::string(result.text(i, 4))), std::stod(std::string(result.text(i, 5)))});
      }
    }
    // Most pending first (the first kMaxBacklogTypes keep their own label), then by name.
    std::sort(by_type.begin(), by_type.end(), [](const auto& a, const auto& b) {
      return a.pending != b.pending ? a.pending > b.pending : a.aggregate_type < b.aggregate_type;
    });
    std::sort(backlog.slowest.begin(), backlog.slowest.end(),
              [](const auto& a, const auto& b) { return a.waiting_age > b.waiting_age; });
    std::vector<observe::BacklogRow>& rows = backlog.rows;
    std::size_t other = kMaxBacklogTypes;  // index of the shared row, once there is one
    for (observe::BacklogRow& row : by_type) {
      if (rows.size() < kMaxBacklogTypes && row.aggregate_type != kOtherAggregateTypes) {
        rows.push_back(std::move(row));
        continue;
      }
      if (other == kMaxBacklogTypes) {
        other = rows.size();
        rows.push_back({kOtherAggregateTypes, 0, 0, 0});
      }
      observe::BacklogRow& shared = rows[other];
      shared.pending += row.pending;
      shared.quarantined += row.quarantined;
      shared.oldest_pending_age = std::max(shared.oldest_pending_age, row.oldest_pending_age);
    }
    return backlog;
  }

  // Two kinds of rows. 'type': pending rows by aggregate type, most pending first, with the age
  // of the oldest aggregate head that should be going: due, or tried before (a retry waiting
  // out its backoff), and not quarantined; a delayed event counts from its available_at
  // (deliver_after), and an event waiting behind its aggregate's head is the head's wait, not a
  // second one. 'slow': the ten aggregates whose head has waited longest, by the same measure
  // (a quarantined head is the quarantine table's, a delayed one not yet due is not waiting),
  // with their pending rows counted from the index. The heads are one pass over the pending index,
  // the counts one over the pending rows: the cost grows with the backlog, not the history.
  std::string backlog_sql() const {
    return fmt::format(R"SQL(
WITH heads AS MATERIALIZED (
  SELECT DISTINCT ON (aggregate_type, aggregate_id)
         aggregate_type, aggregate_id,
         CASE WHEN quarantined_at IS NOT NULL THEN NULL
              WHEN attempt_count > 0 THEN occurred_at
              WHEN available_at <= now() THEN greatest(occurred_at, available_at) END AS since
  FROM {events}
  WHERE published_at IS NULL AND skipped_at IS NULL
  ORDER BY aggregate_type, aggregate_id, aggregate_sequence),
counts AS (
  SELECT aggregate_type, count(*) FILTER (WHERE quarantined_at IS NULL) AS pending,
         count(*) FILTER (WHERE quarantined_at IS NOT NULL) AS quarantined
  FROM {events}
  WHERE published_at IS NULL AND skipped_at IS NULL
  GROUP BY aggregate_type),
ages AS (
  SELECT aggregate_type, extract(epoch FROM now() - min(since)) AS age
  FROM heads GROUP BY aggregate_type),
slowest AS (
  SELECT aggregate_type, aggregate_id, since FROM heads
  WHERE since IS NOT NULL ORDER BY since, aggregate_type, aggregate_id LIMIT 10)
SELECT 'type', c.aggregate_type, NULL, c.pending::text, coalesce(a.age, 0)::text,
       c.quarantined::text
FROM counts c LEFT JOIN ages a USING (aggregate_type)
UNION ALL
SELECT 'slow', s.aggregate_type, s.aggregate_id,
       (SELECT count(*) FROM {events} e
        WHERE e.published_at IS NULL AND e.skipped_at IS NULL
          AND e.aggregate_type = s.aggregate_type AND e.aggregate_id = s.aggregate_id)::text,
       extract(epoch FROM now() - s.since)::text, NULL
FROM slowest s)SQL",
                       fmt::arg("events", options_.schema.table("outbox_events")));
  }

  ObserveOptions options_;
  ListenAddress address_;
  std::vector<std::pair<const Relay*, std::string>> relays_;
  std::vector<std::pair<std::string, std::function<KafkaConsumerStats()>>> consumers_;
  observe::GuardedServer server_{observe::kListenerLimits};
  std::thread thread_;
  int bound_port_ = 0;
  std::mutex backlog_mutex_;
  std::condition_variable backlog_wake_;
  bool stopping_ = false;
  std::thread backlog_thread_;
  std::unique_ptr<pg::Connection> connection_;  // the backlog thread's
  std::mutex api_mutex_;
  std::unique_ptr<pg::Connection> api_connection_;  // the admin page's
  std::vector<observe::BacklogRow> backlog_;
  std::vector<observe::SlowAggregate> slowest_;
  double last_query_seconds_ = -1;  // before the first run: none
  PGcancel* cancel_ = nullptr;      // under backlog_mutex_
  bool querying_ = false;           // under backlog_mutex_
  // refresh_backlog(): runs begun and done, and a run asked for (under backlog_mutex_).
  std::condition_variable backlog_done_;
  std::uint64_t runs_begun_ = 0;
  std::uint64_t runs_done_ = 0;
  bool refresh_asked_ = false;
  bool backlog_started_ = false;
  bool backlog_ok_ = false;
  std::string backlog_error_;
};

ObserveServer::ObserveServer(ObserveOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ObserveServer::~ObserveServer() = default;
void ObserveServer::watch_relay(const Relay& relay, std::string shard) {
  impl_->watch_relay(relay, std::move(shard));
}
void ObserveServer::watch_consumer(std::string consumer,
                                   std::function<KafkaConsumerStats()> stats) {
  impl_->watch_consumer(std::move(consumer), std::move(stats));
}
void ObserveServer::start() { impl_->start(); }
void ObserveServer::stop() noexcept { impl_->stop(); }
std::uint16_t ObserveServer::port() const { return impl_->port(); }
std::string ObserveServer::metrics_text() { return impl_->metrics_text(); }
bool ObserveServer::refresh_backlog(std::chrono::milliseconds timeout) {
  return impl_->refresh_backlog(timeout);
}

}  // namespace outbox
