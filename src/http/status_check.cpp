// `outbox reconcile check`: one GET per event in doubt to the destination's status URL.

#include <curl/curl.h>
#include <fmt/format.h>

#include <memory>

#include "http/http_parts.hpp"
#include "outbox/error.hpp"
#include "outbox/http_sink.hpp"
#include "outbox/text.hpp"

namespace outbox {
namespace {

constexpr std::size_t kMaxBody = 4096;

std::size_t keep(char* data, std::size_t size, std::size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  const std::size_t bytes = size * count;
  if (body->size() < kMaxBody) body->append(data, std::min(bytes, kMaxBody - body->size()));
  return bytes;
}

}  // namespace

HttpStatus ask_http_status(const Event& event, const HttpStatusCheckOptions& options) {
  const http::UrlTemplate url_template(options.url_template);
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : options.headers) {
    if (auto why = http::refuse_extra_header(name, value)) {
      curl_slist_free_all(headers);
      throw ConfigError("HTTP header \"" + printable(name, 100) + "\": " + *why);
    }
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  const std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(
      headers, &curl_slist_free_all);
  const std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(),
                                                                 &curl_easy_cleanup);
  if (!easy) throw Error("libcurl: curl_easy_init failed", true);
  const std::string url = url_template.render(event);
  std::string body;
  char error[CURL_ERROR_SIZE] = {};
  CURL* e = easy.get();
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, header_list.get());
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout.count()));
  if (!options.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!options.proxy_from_environment) curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &keep);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(e);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  if (code != CURLE_OK && status == 0) {
    return {HttpStatusAnswer::unknown,
            "no answer: " + printable(error[0] != '\0' ? error : curl_easy_strerror(code), 300)};
  }
  const std::string said =
      fmt::format("HTTP {}{}", status, body.empty() ? "" : ": " + printable(body, 200));
  if (status == 200) return {HttpStatusAnswer::happened, said};
  if (status == 404) return {HttpStatusAnswer::did_not_happen, said};
  return {HttpStatusAnswer::unknown, said};
}

}  // namespace outbox
