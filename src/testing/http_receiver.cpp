#include "outbox/testing/http_receiver.hpp"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/ascii_case.hpp"

namespace outbox {

class HttpReceiver::Impl {
 public:
  explicit Impl(Options options) : options_(options) {}

  ~Impl() { stop(); }

  void start() {
    std::lock_guard run(run_mutex_);
    if (server_) return;
    auto server = std::make_unique<httplib::Server>();
    server->new_task_queue = [] { return new httplib::ThreadPool(32); };
    server->set_keep_alive_max_count(1000);
    const auto handle = [this](const httplib::Request& request, httplib::Response& response) {
      serve(request, response);
    };
    server->Post(".*", handle);
    server->Put(".*", handle);
    server->Patch(".*", handle);
    server->Get("/status/([^/]+)",
                [this](const httplib::Request& request, httplib::Response& response) {
                  std::lock_guard lock(mutex_);
                  ++counts_.status_requests;
                  const auto it = effects_.find(request.matches[1].str());
                  response.status = it != effects_.end() && it->second > 0 ? 200 : 404;
                });
    if (port_ == 0) {
      const int port = server->bind_to_any_port("127.0.0.1");
      if (port <= 0) throw std::runtime_error("HttpReceiver: no free port on 127.0.0.1");
      port_ = static_cast<std::uint16_t>(port);
    } else {
      // After stop() the port may linger in TIME_WAIT a moment; httplib sets SO_REUSEADDR.
      bool bound = false;
      for (int attempt = 0; attempt < 50 && !bound; ++attempt) {
        bound = server->bind_to_port("127.0.0.1", port_);
        if (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!bound) {
        throw std::runtime_error("HttpReceiver: port " + std::to_string(port_) + " is taken");
      }
    }
    httplib::Server* raw = server.get();
    server_ = std::move(server);
    thread_ = std::thread([raw] { raw->listen_after_bind(); });
    // httplib 0.11 has no wait_until_ready(): stop() before the loop runs would be lost.
    while (!raw->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  void stop() {
    std::lock_guard run(run_mutex_);
    if (!server_) return;
    server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
  }

  void serve(const httplib::Request& request, httplib::Response& response) {
    Request seen{request.method,
                 request.target,
                 {},
                 request.body,
                 200,
                 false,
                 std::chrono::steady_clock::now()};
    for (const auto& [name, value] : request.headers) {
      seen.headers.emplace(detail::ascii_lower(name), value);
    }
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard lock(mutex_);
      ++counts_.requests;
      Scripted answer{1, 200, {}, {}};
      if (!script_.empty()) {
        answer = script_.front();
        if (--script_.front().count == 0) script_.pop_front();
      }
      seen.status = answer.status;
      response.status = answer.status;
      if (!answer.retry_after.empty()) response.set_header("Retry-After", answer.retry_after);
      response.set_content(answer.body, "text/plain");
      if (answer.status >= 200 && answer.status <= 299) apply(seen);
      delay = delay_;
      if (options_.keep_requests) requests_.push_back(seen);
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
  }

  // Under mutex_.
  void apply(Request& seen) {
    const std::string key = header(seen, "idempotency-key");
    std::uint64_t& effects = effects_[key];
    if (effects > 0 && options_.deduplicate) {
      ++counts_.suppressed;
      return;
    }
    if (effects > 0) ++counts_.duplicate_effects;
    ++effects;
    ++counts_.effects;
    seen.applied = true;
    const std::string aggregate = header(seen, "ce-partitionkey");
    const std::string sequence = header(seen, "ce-aggregatesequence");
    if (!sequence.empty() && effects == 1) {
      const long long number = std::stoll(sequence);
      auto [it, first] = last_sequence_.emplace(aggregate, number);
      if (!first) {
        if (number < it->second) ++counts_.inversions;
        it->second = std::max(it->second, number);
      }
    }
  }

  static std::string header(const Request& seen, const char* name) {
    const auto it = seen.headers.find(name);
    return it == seen.headers.end() ? std::string() : it->second;
  }

  struct Scripted {
    int count;
    int status;
    std::string body;
    std::string retry_after;
  };

  Options options_;
  std::mutex run_mutex_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::uint16_t port_ = 0;

  mutable std::mutex mutex_;
  std::deque<Scripted> script_;
  std::chrono::milliseconds delay_{0};
  Counts counts_;
  std::vector<Request> requests_;
  std::map<std::string, std::uint64_t> effects_;
  std::map<std::string, long long> last_sequence_;
};

HttpReceiver::HttpReceiver() : HttpReceiver(Options{}) {}

HttpReceiver::HttpReceiver(Options options) : impl_(std::make_unique<Impl>(options)) {
  impl_->port_ = options.port;
  impl_->start();
}

HttpReceiver::~HttpReceiver() = default;

std::string HttpReceiver::url() const { return "http://127.0.0.1:" + std::to_string(impl_->port_); }
std::uint16_t HttpReceiver::port() const { return impl_->port_; }
void HttpReceiver::stop() { impl_->stop(); }
void HttpReceiver::start() { impl_->start(); }

void HttpReceiver::answer_next(int count, int status, std::string body, std::string retry_after) {
  if (count <= 0) return;
  std::lock_guard lock(impl_->mutex_);
  impl_->script_.push_back({count, status, std::move(body), std::move(retry_after)});
}

void HttpReceiver::set_delay(std::chrono::milliseconds delay) {
  std::lock_guard lock(impl_->mutex_);
  impl_->delay_ = delay;
}

HttpReceiver::Counts HttpReceiver::counts() const {
  std::lock_guard lock(impl_->mutex_);
  Counts counts = impl_->counts_;
  counts.distinct_keys = impl_->effects_.size();
  return counts;
}

std::vector<HttpReceiver::Request> HttpReceiver::requests() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->requests_;
}

std::map<std::string, std::uint64_t> HttpReceiver::effects_by_key() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->effects_;
}

}  // namespace outbox
