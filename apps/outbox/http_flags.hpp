#pragma once
// `outbox relay --sink http`: the HTTP sink's flags (and config keys of the same names), and the
// HttpSinkOptions they make.

#include <chrono>
#include <string>
#include <vector>

#include "outbox/http_sink.hpp"

namespace CLI {
class App;
}

namespace outbox::cli {

struct HttpFlags {
  std::string url;  // --http-url
  std::string method = HttpSinkOptions{}.method;
  std::vector<std::string> headers;  // --http-header "Name: value"
  std::string headers_file;          // --http-headers-file: "Name: value" lines (secrets)
  std::string signing_secret_file;   // --http-signing-secret-file: whsec_ lines
  std::string cloudevents_source = HttpSinkOptions{}.cloudevents_source;
  std::string ca_file;
  std::string connect_timeout = "5s";
  std::string timeout = "10s";
  std::size_t max_connections_per_host = HttpSinkOptions{}.max_connections_per_host;
  std::string max_response = "64KiB";
  std::string max_retry_after = "10m";
  bool proxy_from_env = false;
  std::string on_unknown = "retry";  // --http-on-unknown retry|reconcile
};

// Every flag of the sink (`outbox relay`).
void add_http_options(CLI::App* command, HttpFlags& flags);
// Those of a request alone: headers, headers file, CA file, timeouts, proxy (`outbox reconcile
// check`).
void add_http_request_options(CLI::App* command, HttpFlags& flags);

// Throws ConfigError for a missing --http-url, an unreadable file or a malformed line.
// `lease`: the relay's, which the request timeout must stay below.
HttpSinkOptions http_sink_options(const HttpFlags& flags, std::chrono::milliseconds lease);

// Whether any --http-* flag was given (they are refused with another sink).
bool any_http_flag(const HttpFlags& flags);

}  // namespace outbox::cli
