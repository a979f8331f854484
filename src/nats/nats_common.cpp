#include "nats/nats_common.hpp"

#include <fmt/format.h>

#include <vector>

#include "common/ascii_case.hpp"
#include "common/event_headers.hpp"
#include "outbox/error.hpp"

namespace outbox::nats {
namespace {

// With a callback nats.c connects in the background and natsConnection_Connect returns at once
// (NATS_NOT_YET_CONNECTED) when no server answers; without one it blocks, retrying for ever.
void connected_later(natsConnection* /*connection*/, void* /*closure*/) {}

void check(natsStatus status, const std::string& what) {
  if (status != NATS_OK) throw ConfigError(fmt::format("NATS: {}: {}", what, error_text(status)));
}

std::vector<std::string> split_servers(const std::string& servers) {
  std::vector<std::string> urls;
  std::size_t start = 0;
  while (start <= servers.size()) {
    const std::size_t comma = std::min(servers.find(',', start), servers.size());
    std::string url = servers.substr(start, comma - start);
    const auto first = url.find_first_not_of(" \t");
    const auto last = url.find_last_not_of(" \t");
    url = first == std::string::npos ? std::string() : url.substr(first, last - first + 1);
    if (url.empty()) {
      // The list may hold passwords: only where the empty entry is, not the list itself.
      throw ConfigError("NATS: entry " + std::to_string(urls.size() + 1) +
                        " of the server list is empty; give nats://host:port[,nats://host:port]");
    }
    if (!url.starts_with("nats://") && !url.starts_with("tls://")) {
      // The URL may hold a password: only its scheme is quoted.
      throw ConfigError("NATS: a server URL must begin with nats:// or tls://, and entry " +
                        std::to_string(urls.size() + 1) + " of the server list does not");
    }
    urls.push_back(std::move(url));
    start = comma + 1;
  }
  return urls;
}

}  // namespace

OptionsHandle make_options(const ConnectSettings& settings) {
  const std::vector<std::string> urls = split_servers(settings.servers);
  natsOptions* raw = nullptr;
  check(natsOptions_Create(&raw), "cannot create client options");
  OptionsHandle options(raw);
  std::vector<const char*> pointers;
  for (const auto& url : urls) pointers.push_back(url.c_str());
  check(natsOptions_SetServers(options.get(), pointers.data(), static_cast<int>(pointers.size())),
        "the server list is not usable");
  check(natsOptions_SetName(options.get(), settings.name.c_str()), "name");
  check(natsOptions_SetTimeout(options.get(), settings.connect_timeout.count()), "timeout");
  check(natsOptions_SetMaxReconnect(options.get(), -1), "reconnects");
  check(natsOptions_SetReconnectWait(options.get(), 250), "reconnect wait");
  check(natsOptions_SetRetryOnFailedConnect(options.get(), true, &connected_later, nullptr),
        "retry on failed connect");
  if (!settings.credentials_file.empty()) {
    check(natsOptions_SetUserCredentialsFromFiles(options.get(), settings.credentials_file.c_str(),
                                                  nullptr),
          "credentials file " + settings.credentials_file);
  }
  if (!settings.ca_file.empty()) {
    check(natsOptions_SetSecure(options.get(), true), "TLS");
    check(natsOptions_LoadCATrustedCertificates(options.get(), settings.ca_file.c_str()),
          "CA file " + settings.ca_file);
  }
  return options;
}

void close_and_wait(natsConnection* connection, ClosedSignal& closed) {
  if (connection == nullptr) return;
  natsConnection_Close(connection);
  closed.wait(std::chrono::seconds(5));
}

ConnectionHandle connect(natsOptions* options, bool wait) {
  natsConnection* raw = nullptr;
  natsStatus status = natsConnection_Connect(&raw, options);
  ConnectionHandle connection(raw);
  if (status == NATS_NOT_YET_CONNECTED && wait) {
    // RetryOnFailedConnect returned at once; wait for the background attempts a while.
    for (int i = 0; i < 40 && !natsConnection_IsClosed(connection.get()); ++i) {
      if (natsConnection_Status(connection.get()) == NATS_CONN_STATUS_CONNECTED) return connection;
      nats_Sleep(100);
    }
    throw BrokerError("NATS: no server of the list answered within 4 s", 0, true);
  }
  if (status != NATS_OK && status != NATS_NOT_YET_CONNECTED) {
    throw BrokerError("NATS: cannot connect: " + error_text(status), 0, true);
  }
  return connection;
}

std::string error_text(natsStatus status) {
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  std::string text = natsStatus_GetText(status);
  if (detail != nullptr && *detail != '\0' && last == status && text != detail) {
    text += ": ";
    text += detail;
  }
  return text;
}

bool is_transient(natsStatus status) {
  switch (status) {
    case NATS_TIMEOUT:
    case NATS_NO_SERVER:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
    case NATS_NO_RESPONDERS:
    case NATS_IO_ERROR:
    case NATS_STALE_CONNECTION:
      return true;
    default:
      return false;
  }
}

std::string subject_problem(std::string_view subject) {
  if (subject.empty()) return "is empty";
  if (subject.size() > 4096) return "is longer than 4096 bytes";
  std::size_t token_start = 0;
  for (std::size_t i = 0; i <= subject.size(); ++i) {
    if (i == subject.size() || subject[i] == '.') {
      if (i == token_start) return "has an empty token (two dots, or a dot at an end)";
      const std::string_view token = subject.substr(token_start, i - token_start);
      if (token == "*" || token == ">") return "holds a wildcard token (* or >)";
      token_start = i + 1;
      continue;
    }
    const auto c = static_cast<unsigned char>(subject[i]);
    if (c <= 0x20 || c == 0x7f) return "holds whitespace or a control character";
  }
  return {};
}

bool subject_covers(std::string_view pattern, std::string_view filter) {
  const auto next = [](std::string_view& rest) {
    const std::size_t dot = rest.find('.');
    const std::string_view token = rest.substr(0, dot);
    rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
    return token;
  };
  bool pattern_left = !pattern.empty();
  bool filter_left = !filter.empty();
  while (pattern_left && filter_left) {
    const std::string_view want = next(pattern);
    const std::string_view have = next(filter);
    if (want == ">") return true;
    if (have == ">" || (want != "*" && (have == "*" || want != have))) return false;
    pattern_left = !pattern.empty();
    filter_left = !filter.empty();
  }
  return !pattern_left && !filter_left;
}

bool is_reserved_nats_header(std::string_view name) {
  return detail::is_reserved_header(name) || detail::ascii_lower(name).starts_with("nats-");
}

}  // namespace outbox::nats
