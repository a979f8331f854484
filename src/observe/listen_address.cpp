// ListenAddress (outbox/observe.hpp): a listener's host:port, and whether it is loopback.

#include <arpa/inet.h>
#include <fmt/format.h>

#include <charconv>

#include "outbox/error.hpp"
#include "outbox/observe.hpp"

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

}  // namespace outbox
