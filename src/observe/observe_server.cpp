// ObserveServer (outbox/observe.hpp): the listener's request checks (the bearer token beyond
// loopback, loopback Host names), /metrics, the health probes, and the admin page with its JSON
// API. The backlog query runs beside it (backlog_monitor.hpp).

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "observe/admin_page.hpp"
#include "observe/backlog_monitor.hpp"
#include "observe/guarded_server.hpp"
#include "observe/metric_families.hpp"
#include "observe/overview_json.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"
#include "outbox/observe.hpp"
#include "outbox/quarantine.hpp"
#include "outbox/reconcile.hpp"
#include "outbox/status.hpp"
#include "pg/connection.hpp"

namespace outbox {

namespace {

constexpr std::size_t kMinTokenLength = 16;

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

  ~Impl() { stop(); }

  void watch_relay(const Relay& relay, std::string shard) {
    relays_.emplace_back(&relay, std::move(shard));
  }
  void watch_consumer(std::string consumer, std::function<ObserveServer::ConsumerReading()> read) {
    consumers_.emplace_back(std::move(consumer), std::move(read));
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
      return check_request(request, response);
    });
    add_routes();
    bind();
    server_.widen_backlog(128);  // a failure leaves httplib's 5: slower under a burst, no more
    if (options_.backlog) backlog_monitor_.start();
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // httplib's stop() does nothing before the accept loop runs: wait for it, so a stop() right
    // after start() cannot leave the loop (and our join) running for ever.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    detail::log().info("serving /metrics, /healthz and /readyz on {}:{}", address_.host,
                       bound_port_);
  }

  void stop() noexcept {
    backlog_monitor_.stop();
    if (!thread_.joinable()) return;
    server_.stop_now();  // closes slow clients' connections instead of waiting for them
    thread_.join();
  }

  // Before any handler: what a request may ask for without a token, and the token.
  httplib::Server::HandlerResponse check_request(const httplib::Request& request,
                                                 httplib::Response& response) const {
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
  }

  void add_routes() {
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
  }

  // Binds the listen address (port 0: any free one); a ConfigError names it when it cannot.
  void bind() {
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
    // One backlog run for everything but the quarantine list: the headline, the tables and the
    // sessions say the same.
    const observe::BacklogReading reading = backlog_monitor_.reading_with_history();
    out["backlog_ok"] = reading.ok;
    out["backlog"] = observe::backlog_json(reading.rows);
    out["slots"] = observe::slots_json(reading.slots);
    nlohmann::json parts = this_process_parts();
    const nlohmann::json own_parts = parts;  // for the verdict: relay sessions say it themselves
    out["history"] = observe::history_json(reading.history);
    out["actions_enabled"] = !options_.token.empty();
    // The backlog thread's list (the page costs no second pass over the pending rows).
    out["slowest"] = observe::slowest_json(reading.slowest);
    // One overview at a time; another asked meanwhile is told to come back rather than queue
    // (queued requests would hold the HTTP workers the probes and scrapes need).
    std::unique_lock lock(api_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) throw Busy("the previous overview is still being read; try again");
    PGconn* conn = api_connection();
    // Every relay session the table knows, read now (a page opened right after a relay started
    // lists it at once, before the backlog's next run): alive ones beat every 10 s.
    for (const RelaySessionStatus& relay : read_relay_sessions(conn, options_.schema, 50)) {
      std::string detail;
      if (!relay.ended) detail = fmt::format("seen {:.0f} s ago", relay.seen_seconds_ago);
      if (const std::string role = relay.slot_role(); !role.empty()) detail += "; " + role;
      parts.push_back({{"part", "relay " + relay.relay_id},
                       {"state", std::string(relay.state())},
                       {"detail", detail}});
    }
    out["parts"] = std::move(parts);
    out["quarantine"] = observe::quarantine_json(list_quarantined(conn, options_.schema, 100));
    out["in_doubt"] = observe::in_doubt_json(list_in_doubt(conn, options_.schema, 100, false));
    out["inbox_held"] = observe::inbox_held_json(list_held(conn, options_.schema, {}, 100));
    // Last, so a consumer's parked events (counted, not only the 100 listed) are in it.
    out["verdict"] = observe::verdict_json(reading, own_parts, count_held(conn, options_.schema));
    return out;
  }

  // The relays and consumers this process runs, as the overview's parts.
  nlohmann::json this_process_parts() const {
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& [relay, shard] : relays_) {
      const RelayStats s = relay->stats();
      parts.push_back({{"part", "relay " + relay->relay_id() + " (this process)"},
                       {"state", to_string(s.health)},
                       {"detail", s.last_error}});
    }
    for (const auto& [name, stats] : consumers_) {
      const ObserveServer::ConsumerReading s = stats();
      parts.push_back({{"part", "consumer " + name + " (this process)"},
                       {"state", to_string(s.health)},
                       {"detail", s.last_error}});
    }
    return parts;
  }
  std::string metrics_text() {
    observe::Families families;
    observe::add_build_info(families);
    for (const auto& [relay, shard] : relays_) {
      observe::add_relay(families, relay->metrics(), shard);
    }
    for (const auto& [name, stats] : consumers_) {
      const ObserveServer::ConsumerReading s = stats();
      observe::add_consumer(families, name, s.samples, s.health);
    }
    if (options_.backlog) {
      const observe::BacklogReading reading = backlog_monitor_.reading();
      observe::add_backlog_up(families, reading.ok, reading.last_query_seconds);
      if (reading.ok) {
        observe::add_backlog(families, reading.rows);
        observe::add_slots(families, reading.slots);
        observe::add_relay_sessions(families, reading.sessions);
      }
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
      const ObserveServer::ConsumerReading s = stats();
      check("consumer " + name, s.health, s.last_error);
    }
    if (relays_.empty() && consumers_.empty() && options_.backlog) {
      const observe::BacklogReading reading = backlog_monitor_.reading();
      if (ready && !reading.ok) ok = false;
      body += reading.ok ? "database: reachable\n" : "database: " + reading.error + "\n";
    }
    if (!options_.token.empty() && !address_.loopback()) {
      // Unauthenticated callers reach these: states only.
      body = ok ? "ok\n" : "not ok\n";
    }
    return {ok, body.empty() ? "ok\n" : body};
  }

 public:
  // Asks for a run now (or once the last run's stretch is over: earliest_asked_backlog_query) and
  // waits up to `timeout` for one that began after the call.
  bool refresh_backlog(std::chrono::milliseconds timeout) {
    return backlog_monitor_.refresh(timeout);
  }

 private:
  ObserveOptions options_;
  ListenAddress address_;
  std::vector<std::pair<const Relay*, std::string>> relays_;
  std::vector<std::pair<std::string, std::function<ObserveServer::ConsumerReading()>>> consumers_;
  observe::GuardedServer server_{observe::kListenerLimits};
  std::thread thread_;
  int bound_port_ = 0;
  std::mutex api_mutex_;
  std::unique_ptr<pg::Connection> api_connection_;  // the admin page's
  observe::BacklogMonitor backlog_monitor_{options_.database_url, options_.schema,
                                           options_.backlog_refresh};
};

ObserveServer::ObserveServer(ObserveOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ObserveServer::~ObserveServer() = default;
void ObserveServer::watch_relay(const Relay& relay, std::string shard) {
  impl_->watch_relay(relay, std::move(shard));
}
void ObserveServer::watch_consumer(std::string consumer, std::function<ConsumerReading()> read) {
  impl_->watch_consumer(std::move(consumer), std::move(read));
}
void ObserveServer::start() { impl_->start(); }
void ObserveServer::stop() noexcept { impl_->stop(); }
std::uint16_t ObserveServer::port() const { return impl_->port(); }
std::string ObserveServer::metrics_text() { return impl_->metrics_text(); }
bool ObserveServer::refresh_backlog(std::chrono::milliseconds timeout) {
  return impl_->refresh_backlog(timeout);
}

}  // namespace outbox
