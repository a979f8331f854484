#include "http_flags.hpp"

#include <CLI/CLI.hpp>
#include <sstream>

#include "cli/cli_common.hpp"
#include "cli/settings_file.hpp"
#include "outbox/byte_size.hpp"
#include "outbox/duration.hpp"
#include "outbox/error.hpp"

namespace outbox::cli {
namespace {

// "Name: value" as a pair; nullopt when there is no colon or no name.
std::optional<std::pair<std::string, std::string>> split_header(const std::string& line) {
  const auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string name = line.substr(0, colon);
  std::string value = line.substr(colon + 1);
  const auto trim = [](std::string& text) {
    text.erase(0, text.find_first_not_of(" \t"));
    text.erase(text.find_last_not_of(" \t") + 1);
  };
  trim(name);
  trim(value);
  return std::pair{std::move(name), std::move(value)};
}

// The lines of a settings file that are not blank or '#' comments, each with its number.
std::vector<std::pair<int, std::string>> content_lines(const std::string& path,
                                                       const std::string& what) {
  const SettingsFile file = read_settings_file(path, what + " file");
  warn_if_open_to_others(file, path, what);
  std::vector<std::pair<int, std::string>> lines;
  std::istringstream in(file.content);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    lines.emplace_back(number, line);
  }
  return lines;
}

}  // namespace

constexpr const char* kGroup = "HTTP sink (--sink http)";

void add_http_options(CLI::App* command, HttpFlags& flags) {
  const auto* group = kGroup;
  command
      ->add_option("--http-url", flags.url,
                   "the URL per event; {aggregate_type}, {aggregate_id}, {event_type} and "
                   "{event_id} in its path or query are replaced, percent-encoded")
      ->group(group);
  command->add_option("--http-method", flags.method, "POST, PUT or PATCH")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--http-signing-secret-file", flags.signing_secret_file,
                   "Standard Webhooks secrets (whsec_...), one per line; two while rotating")
      ->group(group);
  command
      ->add_option("--http-cloudevents-source", flags.cloudevents_source,
                   "ce-source of the CloudEvents headers (\"\": send no ce- headers)")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--http-max-connections-per-host", flags.max_connections_per_host,
                   "requests beyond wait for a connection")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str()
      ->group(group);
  command->add_option("--http-max-response", flags.max_response, "response body bytes read")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--http-max-retry-after", flags.max_retry_after,
                   "the longest Retry-After honoured")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--http-on-unknown", flags.on_unknown,
                   "no status after a request was sent: retry (with the same Idempotency-Key; "
                   "for endpoints that honour it) or reconcile (never sent again: parked in "
                   "doubt for `outbox reconcile`; for endpoints without idempotency)")
      ->check(CLI::IsMember({"retry", "reconcile"}))
      ->capture_default_str()
      ->group(group);
  add_http_request_options(command, flags);
}

void add_http_request_options(CLI::App* command, HttpFlags& flags) {
  const auto* group = kGroup;
  command
      ->add_option("--http-header", flags.headers,
                   "\"Name: value\" on every request (repeatable; secrets in --http-headers-file)")
      ->group(group);
  command
      ->add_option("--http-headers-file", flags.headers_file,
                   "a file of \"Name: value\" lines, e.g. Authorization: Bearer ... ('#' comments)")
      ->group(group);
  command->add_option("--http-ca-file", flags.ca_file, "PEM CA bundle (default: the system's)")
      ->group(group);
  command->add_option("--http-connect-timeout", flags.connect_timeout, "connecting at most")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--http-timeout", flags.timeout,
                   "a whole request at most; below --lease-ms. No status by then: an unknown "
                   "outcome (--http-on-unknown)")
      ->capture_default_str()
      ->group(group);
  command
      ->add_flag("--http-proxy-from-env", flags.proxy_from_env,
                 "use http_proxy, https_proxy and no_proxy (ignored otherwise)")
      ->group(group);
}

HttpSinkOptions http_sink_options(const HttpFlags& flags, std::chrono::milliseconds lease) {
  if (flags.url.empty()) {
    throw ConfigError(
        "relay: --sink http needs --http-url, e.g. "
        "https://api.example.com/events/{aggregate_type}/{aggregate_id}");
  }
  HttpSinkOptions options;
  options.url_template = flags.url;
  options.method = flags.method;
  const auto header = [&](const std::string& line, const std::string& where) {
    auto pair = split_header(line);
    if (!pair) throw ConfigError(where + ": expected \"Name: value\"");
    options.headers.push_back(std::move(*pair));
  };
  // The value may be a secret: a malformed line is named by its place, never echoed.
  for (std::size_t i = 0; i < flags.headers.size(); ++i) {
    header(flags.headers[i], "--http-header number " + std::to_string(i + 1));
  }
  if (!flags.headers_file.empty()) {
    for (const auto& [number, line] : content_lines(flags.headers_file, "HTTP headers")) {
      header(line, "HTTP headers file " + flags.headers_file + ", line " + std::to_string(number));
    }
  }
  if (!flags.signing_secret_file.empty()) {
    for (const auto& [number, line] :
         content_lines(flags.signing_secret_file, "HTTP signing secret")) {
      options.signing_secrets.push_back(line.substr(0, line.find_last_not_of(" \t") + 1));
    }
    if (options.signing_secrets.empty()) {
      throw ConfigError("HTTP signing secret file " + flags.signing_secret_file +
                        " holds no secret");
    }
  }
  options.cloudevents_source = flags.cloudevents_source;
  options.ca_file = flags.ca_file;
  options.connect_timeout = parse_duration(flags.connect_timeout);
  options.timeout = parse_duration(flags.timeout);
  options.max_timeout = lease;
  options.max_connections_per_host = flags.max_connections_per_host;
  options.max_response_bytes = parse_byte_size(flags.max_response);
  options.max_retry_after = parse_duration(flags.max_retry_after);
  options.proxy_from_environment = flags.proxy_from_env;
  options.on_unknown =
      flags.on_unknown == "reconcile" ? HttpOnUnknown::reconcile : HttpOnUnknown::retry;
  return options;
}

bool any_http_flag(const HttpFlags& flags) {
  const HttpFlags defaults;
  return !flags.url.empty() || !flags.headers.empty() || !flags.headers_file.empty() ||
         !flags.signing_secret_file.empty() || !flags.ca_file.empty() ||
         flags.method != defaults.method || flags.timeout != defaults.timeout ||
         flags.connect_timeout != defaults.connect_timeout || flags.proxy_from_env ||
         flags.on_unknown != defaults.on_unknown ||
         flags.max_connections_per_host != defaults.max_connections_per_host ||
         flags.max_response != defaults.max_response ||
         flags.max_retry_after != defaults.max_retry_after ||
         flags.cloudevents_source != defaults.cloudevents_source;
}

}  // namespace outbox::cli
