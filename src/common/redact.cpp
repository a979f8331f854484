#include "common/redact.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <unordered_set>
#include <utility>

#include "common/ascii_case.hpp"

namespace outbox::detail {
namespace {

struct Span {
  std::size_t begin = 0;
  std::size_t length = 0;
};

bool is_password_keyword(std::string_view key) { return key == "password" || key == "sslpassword"; }

// A keyword of the libpq this process runs with (PQconndefaults: its own list, whatever its
// version), other than the passwords. Read once; empty if libpq could not say (out of memory),
// in which case every value of a connection string counts as secret.
bool is_known_keyword(std::string_view key) {
  static const std::unordered_set<std::string> known = [] {
    std::unordered_set<std::string> keywords;
    if (PQconninfoOption* options = PQconndefaults()) {
      for (const PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
        if (!is_password_keyword(option->keyword)) keywords.insert(option->keyword);
      }
      PQconninfoFree(options);
    }
    return keywords;
  }();
  return known.contains(std::string(key));
}

// In a connection string (a URI, or key=value text naming at least one libpq keyword), a
// keyword libpq does not know may be a misspelt password ("passwor=..."): its value is hidden
// too. Elsewhere (any command-line argument is searched) only the password keywords count.
bool is_secret_keyword(std::string_view key, bool in_connection_string = true) {
  return is_password_keyword(key) || (in_connection_string && !is_known_keyword(key));
}

bool looks_like_uri(std::string_view text) {
  return text.starts_with("postgresql://") || text.starts_with("postgres://");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decoded(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int high = hex_value(text[i + 1]);
      const int low = hex_value(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out += static_cast<char>(high * 16 + low);
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

// The spans of secret values in a URI starting at `offset` of the whole string.
void uri_secret_spans(std::string_view uri, std::size_t offset, std::vector<Span>& spans) {
  const std::size_t start = uri.find("://") + 3;
  // libpq ends the user info at the first '@' before any '/'.
  std::size_t end = start;
  while (end < uri.size() && uri[end] != '@' && uri[end] != '/') ++end;
  if (end < uri.size() && uri[end] == '@') {
    const std::size_t colon = uri.find(':', start);
    if (colon != std::string_view::npos && colon < end && colon + 1 < end) {
      spans.push_back({offset + colon + 1, end - colon - 1});
    }
  }
  const std::size_t query = uri.find('?', start);
  if (query == std::string_view::npos) return;
  for (std::size_t pos = query + 1; pos < uri.size();) {
    std::size_t next = uri.find('&', pos);
    if (next == std::string_view::npos) next = uri.size();
    const std::string_view pair = uri.substr(pos, next - pos);
    const std::size_t eq = pair.find('=');
    if (eq != std::string_view::npos && is_secret_keyword(percent_decoded(pair.substr(0, eq))) &&
        eq + 1 < pair.size()) {
      spans.push_back({offset + pos + eq + 1, pair.size() - eq - 1});
    }
    pos = next + 1;
  }
}

// The spans of secret values in a keyword/value string (libpq's rules: key = value, values
// single-quoted with backslash escapes or bare up to whitespace). A dbname value that is itself a
// connection string is searched too.
void keyword_secret_spans(std::string_view text, std::vector<Span>& spans,
                          bool in_connection_string) {
  std::size_t i = 0;
  auto skip_space = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  while (i < text.size()) {
    skip_space();
    const std::size_t key_begin = i;
    while (i < text.size() && text[i] != '=' && !std::isspace(static_cast<unsigned char>(text[i])))
      ++i;
    const std::string_view key = text.substr(key_begin, i - key_begin);
    skip_space();
    if (i >= text.size() || text[i] != '=') {
      // Not key=value: libpq refuses the string. Treat what follows as possibly secret only when
      // it follows a secret keyword (e.g. "password secret").
      if (is_password_keyword(key) && i < text.size()) {
        const std::size_t value_begin = i;
        while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        spans.push_back({value_begin, i - value_begin});
      }
      if (key.empty()) ++i;
      continue;
    }
    ++i;  // '='
    skip_space();
    const std::size_t value_begin = i;
    if (i < text.size() && text[i] == '\'') {
      ++i;
      while (i < text.size() && text[i] != '\'') i += text[i] == '\\' ? 2 : 1;
      i = std::min(i + 1, text.size());
    } else {
      while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) {
        i += text[i] == '\\' ? 2 : 1;
      }
      i = std::min(i, text.size());
    }
    const std::string_view value = text.substr(value_begin, i - value_begin);
    if (is_secret_keyword(key, in_connection_string) && !value.empty()) {
      spans.push_back({value_begin, value.size()});
    } else if (key == "dbname") {
      const bool quoted = value.starts_with('\'');
      const std::string_view inner =
          quoted ? value.substr(1, value.size() >= 2 ? value.size() - 2 : 0) : value;
      const std::size_t inner_offset = value_begin + (quoted ? 1 : 0);
      if (looks_like_uri(inner)) {
        uri_secret_spans(inner, inner_offset, spans);
      } else if (inner.find('=') != std::string_view::npos) {
        std::vector<Span> nested;
        keyword_secret_spans(inner, nested, true);
        for (Span& span : nested) spans.push_back({inner_offset + span.begin, span.length});
      }
    }
  }
}

// True when a word before an '=' in `text` is a libpq keyword: `text` is a connection string.
bool names_known_keyword(std::string_view text) {
  const auto word_char = [](char c) {
    return c == '_' || std::isalnum(static_cast<unsigned char>(c)) != 0;
  };
  for (std::size_t at = 0; (at = text.find('=', at)) != std::string_view::npos; ++at) {
    std::size_t end = at;
    while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
    std::size_t begin = end;
    while (begin > 0 && word_char(text[begin - 1])) --begin;
    if (is_known_keyword(text.substr(begin, end - begin))) return true;
  }
  return false;
}

std::vector<Span> secret_spans(std::string_view conninfo) {
  std::vector<Span> spans;
  std::size_t lead = 0;
  while (lead < conninfo.size() && std::isspace(static_cast<unsigned char>(conninfo[lead]))) ++lead;
  if (looks_like_uri(conninfo.substr(lead))) {
    uri_secret_spans(conninfo.substr(lead), lead, spans);
  } else {
    keyword_secret_spans(conninfo, spans, names_known_keyword(conninfo));
  }
  return spans;
}

// A quoted keyword value as libpq reads it.
std::string unquoted(std::string_view value) {
  if (!value.starts_with('\'')) {
    std::string out;
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (value[i] == '\\' && i + 1 < value.size()) ++i;
      out += value[i];
    }
    return out;
  }
  std::string out;
  for (std::size_t i = 1; i < value.size() && value[i] != '\''; ++i) {
    if (value[i] == '\\' && i + 1 < value.size()) ++i;
    out += value[i];
  }
  return out;
}

}  // namespace

}  // namespace outbox::detail

namespace outbox {

using namespace detail;  // this file's helpers

std::vector<std::string> connection_secrets(std::string_view conninfo) {
  std::vector<std::string> secrets;
  auto add = [&](std::string secret) {
    if (!secret.empty() && std::find(secrets.begin(), secrets.end(), secret) == secrets.end()) {
      secrets.push_back(std::move(secret));
    }
  };
  for (const Span& span : secret_spans(conninfo)) {
    const std::string_view raw = conninfo.substr(span.begin, span.length);
    add(std::string(raw));
    add(percent_decoded(raw));
    add(unquoted(raw));
  }
  return secrets;
}

std::string redact_connection_string(std::string_view conninfo) {
  std::vector<Span> spans = secret_spans(conninfo);
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin > b.begin; });
  std::string out(conninfo);
  for (const Span& span : spans) out.replace(span.begin, span.length, kRedacted);
  return out;
}

std::string scrub(std::string text, const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    if (secret.size() < kShortestScrubbed) continue;
    for (std::size_t at = text.find(secret); at != std::string::npos;
         at = text.find(secret, at + kRedacted.size())) {
      text.replace(at, secret.size(), kRedacted);
    }
  }
  return text;
}

bool is_secret_kafka_property(std::string_view key) {
  const std::string lower = detail::ascii_lower(key);
  static constexpr std::array<std::string_view, 8> kMarks = {
      "password", "secret", "key", "token", "sasl", "jaas", "oauth", "credential"};
  return std::any_of(kMarks.begin(), kMarks.end(),
                     [&](std::string_view mark) { return lower.find(mark) != std::string::npos; });
}

namespace detail {

std::string redact_url_password(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const std::size_t start = scheme + 3;
  // The last '@' of all: a password may hold '/' and '@' unencoded; a path with '@' in it is
  // rare, and hiding too much of an error's URL costs less than showing a password.
  const auto at = url.rfind('@');
  if (at == std::string::npos || at < start) return url;
  const auto colon = url.find(':', start);
  const std::size_t secret = colon != std::string::npos && colon < at ? colon + 1 : start;
  return url.substr(0, secret) + "***" + url.substr(at);
}

}  // namespace detail
}  // namespace outbox
