#include "outbox/http_sink.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/log.hpp"
#include "common/stat_list.hpp"
#include "http/http_parts.hpp"
#include "outbox/error.hpp"
#include "outbox/text.hpp"
#include "sinks/ready_reports.hpp"

namespace outbox {
namespace {

// The HTTP sink's own statistics (outbox/stats.hpp; Sink::stats()).
#define OUTBOX_HTTP_SINK_STATS(X)                                                                \
  X(http_requests, counter, never, "outbox_relay_http_requests_total", "{} HTTP request(s)",     \
    "HTTP requests finished (any outcome).")                                                     \
  X(http_refused, counter, when_set, "outbox_relay_http_refused_total",                          \
    "{} refused by the endpoint (4xx, 3xx)",                                                     \
    "Responses that refuse the event for good (3xx, 4xx other than 408, 425, 429): each "        \
    "quarantines its event.")                                                                    \
  X(http_retry_later, counter, when_set, "outbox_relay_http_retry_later_total",                  \
    "{} told to retry (408/425/429/5xx)",                                                        \
    "Responses that ask for a retry (408, 425, 429, 5xx), Retry-After honoured.")                \
  X(http_not_sent, counter, when_set, "outbox_relay_http_not_sent_total",                        \
    "{} not sent (no connection)",                                                               \
    "Requests that never left: no connection, refused, TLS failed. Retried; nothing happened.")  \
  X(http_unknown_outcomes, counter, when_set, "outbox_relay_http_unknown_outcomes_total",        \
    "{} without an answer after sending",                                                        \
    "Requests written with no status back (timeout, reset, closed): retried with the same key, " \
    "or parked in doubt with --http-on-unknown reconcile.")

// libcurl's global state, set up once per process before any handle (curl_global_init is not
// thread safe before 7.84, so it runs under the static's guard).
void init_curl_once() {
  static const bool done = [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw Error("libcurl could not be initialised (curl_global_init)", false);
    }
    return true;
  }();
  (void)done;
}

std::string method_or_refuse(const std::string& method) {
  if (method == "POST" || method == "PUT" || method == "PATCH") return method;
  throw ConfigError("HTTP method \"" + method + "\": POST, PUT or PATCH (a request with a body)");
}

void check_options(const HttpSinkOptions& options) {
  method_or_refuse(options.method);
  for (const auto& [name, value] : options.headers) {
    if (auto why = http::refuse_extra_header(name, value)) {
      throw ConfigError("HTTP header \"" + printable(name, 100) + "\": " + *why);
    }
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    throw ConfigError("HTTP timeouts must be above 0");
  }
  if (options.connect_timeout > options.timeout) {
    throw ConfigError("the HTTP connect timeout is longer than the request timeout");
  }
  if (options.max_timeout.count() > 0 && options.timeout >= options.max_timeout) {
    throw ConfigError(fmt::format(
        "the HTTP request timeout ({} ms) must be below the relay's lease ({} ms): a request "
        "still running when its lease ends could arrive after another relay delivered the event "
        "and its successor",
        options.timeout.count(), options.max_timeout.count()));
  }
  if (!options.ca_file.empty() && !std::ifstream(options.ca_file).good()) {
    throw ConfigError("HTTP CA file " + options.ca_file + " cannot be read");
  }
  if (options.max_connections_per_host == 0) {
    throw ConfigError("HTTP connections per host must be at least 1");
  }
}

// One request: what curl needs alive until it finishes.
struct Transfer {
  std::uint64_t ticket = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string url;
  std::string body;
  std::string response;
  std::size_t max_response = 0;
  char error[CURL_ERROR_SIZE] = {};

  Transfer() = default;
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  ~Transfer() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
  }
};

std::size_t keep_response(char* data, std::size_t size, std::size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const std::size_t bytes = size * count;
  const std::size_t room =
      transfer->max_response - std::min(transfer->max_response, transfer->response.size());
  // Past the bound the rest is read and dropped: stopping would turn an answered request into
  // a write error, and the status is what counts.
  transfer->response.append(data, std::min(bytes, room));
  return bytes;
}

class HttpSink final : public Sink {
 public:
  explicit HttpSink(const HttpSinkOptions& options)
      : options_(options), url_(options.url_template), method_(method_or_refuse(options.method)) {
    check_options(options);
    for (const std::string& secret : options.signing_secrets) {
      std::string why;
      auto key = http::decode_webhook_secret(secret, &why);
      if (!key) throw ConfigError("HTTP signing secret: " + why);
      keys_.push_back(std::move(*key));
    }
    init_curl_once();
    multi_ = curl_multi_init();
    if (multi_ == nullptr) throw Error("libcurl: curl_multi_init failed", false);
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(options.max_connections_per_host));
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      static_cast<long>(options.max_connections_per_host) * 4);
    worker_ = std::thread([this] { run(); });
  }

  ~HttpSink() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    curl_multi_wakeup(multi_);
    worker_.join();
    for (auto& [easy, transfer] : running_) curl_multi_remove_handle(multi_, easy);
    running_.clear();
    curl_multi_cleanup(multi_);
  }

  HttpSink(const HttpSink&) = delete;
  HttpSink& operator=(const HttpSink&) = delete;

  void send(const Event& event, std::uint64_t ticket) override {
    auto transfer = prepare(event, ticket);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mutex_);
      queued_.push_back(std::move(transfer));
    }
    curl_multi_wakeup(multi_);
  }

  [[nodiscard]] int wake_fd() const override { return ready_.fd(); }

  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    std::unique_lock lock(mutex_);
    done_.wait_for(lock, max_wait, [&] { return !ready_.empty(); });
    in_flight_.fetch_sub(ready_.take_into(reports), std::memory_order_relaxed);
  }

  [[nodiscard]] std::size_t in_flight() const override {
    return in_flight_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] std::string describe() const override { return "http(" + url_.origin() + ")"; }

  [[nodiscard]] bool repeats_are_duplicates() const override {
    return options_.on_unknown == HttpOnUnknown::reconcile;
  }

  [[nodiscard]] std::vector<StatSample> stats() const override {
    return OUTBOX_STAT_SAMPLES(OUTBOX_HTTP_SINK_STATS, counters_, detail::kRelaxed);
  }

 private:
  std::unique_ptr<Transfer> prepare(const Event& event, std::uint64_t ticket) {
    auto transfer = std::make_unique<Transfer>();
    transfer->ticket = ticket;
    transfer->url = url_.render(event);
    transfer->body = event.payload;
    transfer->max_response = options_.max_response_bytes;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const auto timestamp = std::chrono::duration_cast<std::chrono::seconds>(now).count();
    auto append = [&](const std::string& name, const std::string& value) {
      const std::string line = name + ": " + value;
      transfer->headers = curl_slist_append(transfer->headers, line.c_str());
    };
    for (const auto& [name, value] :
         http::event_headers(event, keys_, timestamp, options_.cloudevents_source)) {
      append(name, value);
    }
    for (const auto& [name, value] : options_.headers) append(name, value);
    transfer->headers = curl_slist_append(transfer->headers, "Expect:");  // no 100-continue wait
    transfer->easy = curl_easy_init();
    if (transfer->easy == nullptr || transfer->headers == nullptr) {
      throw Error("libcurl: out of memory preparing a request", true);
    }
    configure(*transfer);
    return transfer;
  }

  void configure(Transfer& t) const {
    CURL* easy = t.easy;
    curl_easy_setopt(easy, CURLOPT_URL, t.url.c_str());
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method_.c_str());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, t.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t.body.size()));
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t.headers);
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);  // no dot-segment squashing of the path
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options_.connect_timeout.count()));
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout.count()));
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!options_.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, options_.ca_file.c_str());
    if (options_.on_unknown == HttpOnUnknown::reconcile) {
      // curl sends a request again by itself when a reused connection turns out closed: for an
      // endpoint that cannot recognise a repeat, every request has a connection of its own.
      curl_easy_setopt(easy, CURLOPT_FORBID_REUSE, 1L);
      curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);
      // HTTP/2 lets curl send a refused stream again by itself, too.
      curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    }
    // "" turns proxies off, the environment's (http_proxy, ...) included.
    if (!options_.proxy_from_environment) curl_easy_setopt(easy, CURLOPT_PROXY, "");
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &keep_response);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t.error);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, &t);
  }

  // The worker: adds queued transfers, drives curl, turns finished ones into reports. Whatever
  // goes wrong, every send still gets its one report: a transfer curl would not take is reported
  // not sent (nothing left), and an exception here reports every transfer it holds as an unknown
  // outcome rather than ending the process.
  void run() {
    for (;;) {
      try {
        if (!step()) return;
      } catch (const std::exception& e) {
        detail::log().error("http sink: {}; reporting what is in flight as unknown", e.what());
        for (auto& [easy, transfer] : running_) {
          curl_multi_remove_handle(multi_, easy);
          report_now(transfer->ticket, DeliveryOutcome::unknown,
                     std::string("sink failed: ") + e.what());
        }
        running_.clear();
      }
    }
  }

  bool step() {
    std::vector<std::uint64_t> refused;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return false;
      for (auto& transfer : queued_) {
        CURL* easy = transfer->easy;
        if (curl_multi_add_handle(multi_, easy) != CURLM_OK) {
          refused.push_back(transfer->ticket);
          continue;
        }
        running_.emplace(easy, std::move(transfer));
      }
      queued_.clear();
    }
    for (const std::uint64_t ticket : refused) {
      report_now(ticket, DeliveryOutcome::retryable_failure,
                 "not sent: libcurl refused the transfer");
    }
    int still_running = 0;
    curl_multi_perform(multi_, &still_running);
    collect();
    curl_multi_poll(multi_, nullptr, 0, 1000, nullptr);
    return true;
  }

  void report_now(std::uint64_t ticket, DeliveryOutcome outcome, std::string error) {
    DeliveryReport report;
    report.ticket = ticket;
    report.outcome = outcome;
    report.error = std::move(error);
    {
      std::lock_guard lock(mutex_);
      ready_.add(std::move(report));
    }
    done_.notify_one();
  }

  void collect() {
    int left = 0;
    while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
      if (message->msg != CURLMSG_DONE) continue;
      CURL* easy = message->easy_handle;
      const CURLcode code = message->data.result;
      curl_multi_remove_handle(multi_, easy);
      auto it = running_.find(easy);
      if (it == running_.end()) continue;
      DeliveryReport report = finish(*it->second, code);
      running_.erase(it);
      {
        std::lock_guard lock(mutex_);
        ready_.add(std::move(report));
      }
      done_.notify_one();
    }
  }

  DeliveryReport finish(Transfer& t, CURLcode code) {
    http::Response response;
    response.curl_code = static_cast<int>(code);
    response.curl_error = t.error[0] != '\0' ? std::string(t.error) : curl_easy_strerror(code);
    long status = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
    response.status = status;
    long request_size = 0;
    curl_easy_getinfo(t.easy, CURLINFO_REQUEST_SIZE, &request_size);
    response.request_written = request_size > 0;
    curl_off_t retry_after = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RETRY_AFTER, &retry_after);
    response.retry_after_seconds = static_cast<std::int64_t>(retry_after);
    const char* location = nullptr;
    curl_easy_getinfo(t.easy, CURLINFO_REDIRECT_URL, &location);
    if (location != nullptr) response.location = location;
    response.body = std::move(t.response);
    DeliveryReport report = http::classify(
        response, options_.on_unknown == HttpOnUnknown::reconcile, options_.max_retry_after);
    report.ticket = t.ticket;
    count(report, status);
    return report;
  }

  void count(const DeliveryReport& report, long status) {
    const auto add = [](auto& counter) { counter.fetch_add(1, std::memory_order_relaxed); };
    add(counters_.http_requests);
    switch (report.outcome) {
      case DeliveryOutcome::published:
        break;
      case DeliveryOutcome::permanent_failure:
        add(counters_.http_refused);
        break;
      case DeliveryOutcome::retryable_failure:
        add(status > 0 ? counters_.http_retry_later : counters_.http_not_sent);
        break;
      case DeliveryOutcome::unknown:
      case DeliveryOutcome::in_doubt:
        add(counters_.http_unknown_outcomes);
        break;
    }
  }

  HttpSinkOptions options_;
  http::UrlTemplate url_;
  std::string method_;
  std::vector<std::string> keys_;
  CURLM* multi_ = nullptr;
  std::thread worker_;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> running_;  // the worker's alone

  std::mutex mutex_;
  std::condition_variable done_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Transfer>> queued_;
  detail::ReadyReports ready_;  // under mutex_
  std::atomic<std::size_t> in_flight_{0};

  struct Counters {
    OUTBOX_HTTP_SINK_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

}  // namespace

std::unique_ptr<Sink> make_http_sink(const HttpSinkOptions& options) {
  return std::make_unique<HttpSink>(options);
}

std::string render_url(const std::string& url_template, const Event& event) {
  return http::UrlTemplate(url_template).render(event);
}

}  // namespace outbox
