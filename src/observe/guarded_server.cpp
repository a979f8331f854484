#include "observe/guarded_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>

namespace outbox::observe {

namespace {

using Clock = std::chrono::steady_clock;

void address_of(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int got = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&address), &length)
                       : ::getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length);
  if (got != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

}  // namespace

// httplib's thread pool with the admission in front: a connection there is no room for is closed
// on the accept thread at once (httplib's own pool queues it, and its descriptor, for ever).
class GuardedServer::Queue : public httplib::TaskQueue {
 public:
  Queue(GuardedServer& server, std::size_t threads) : server_(server), pool_(threads) {}

  // On the accept thread, for each accepted socket.
  void enqueue(std::function<void()> serve) override {
    const socket_t sock = socket_of(serve);
    const auto connection = sock == INVALID_SOCKET ? std::nullopt : server_.admit(sock);
    if (!connection) {
      refuse(sock);
      return;
    }
    pool_.enqueue([serve = std::move(serve), connection] {
      serving_ = connection;
      serve();
      serving_.reset();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  // httplib hands over a closure, `process_and_close_socket(sock)`, not the socket: called in
  // peeking mode it only tells which socket it serves.
  static socket_t socket_of(const std::function<void()>& serve) {
    socket_t sock = INVALID_SOCKET;
    peek_into_ = &sock;
    serve();
    peek_into_ = nullptr;
    return sock;
  }

  // A short answer the client reads as "try later", not a reset, and the socket closed.
  static void refuse(socket_t sock) {
    if (sock == INVALID_SOCKET) return;
    constexpr std::string_view kFull =
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    (void)::send(sock, kFull.data(), kFull.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

  GuardedServer& server_;
  httplib::ThreadPool pool_;
};

// A connection's socket as httplib reads and writes it, within the request's and the answer's
// deadlines, and ended by stop_now() (the wake pipe) or an eviction (shutdown of the socket).
class GuardedServer::DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(GuardedServer& server, Connection& connection)
      : server_(server),
        connection_(connection),
        request_deadline_(connection.accepted + server.limits_.request_deadline) {}

  bool is_readable() const override { return begin_ < end_ || wait(POLLIN, request_deadline_); }
  bool is_writable() const override { return wait(POLLOUT, answer_deadline()); }

  ssize_t read(char* ptr, size_t size) override {
    while (begin_ == end_) {
      if (!wait(POLLIN, request_deadline_)) return -1;
      const ssize_t got = ::recv(connection_.fd, buffer_, sizeof(buffer_), MSG_DONTWAIT);
      if (got == 0) return 0;
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return -1;
      }
      begin_ = 0;
      end_ = static_cast<std::size_t>(got);
    }
    const std::size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!answering_) {
      answering_ = Clock::now() + server_.limits_.response_deadline;
      server_.enter(connection_, Phase::answering);
    }
    // Never a blocking send: it would wait for a reader that does not read past any deadline.
    while (wait(POLLOUT, *answering_)) {
      const ssize_t sent = ::send(connection_.fd, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent >= 0) return sent;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
    return -1;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(connection_.fd, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(connection_.fd, false, ip, port);
  }
  socket_t socket() const override { return connection_.fd; }

 private:
  Clock::time_point answer_deadline() const {
    return answering_.value_or(Clock::now() + server_.limits_.response_deadline);
  }

  // Whether the socket has `events` before `deadline`; false once stopping. An evicted socket
  // (shut down) is readable and writable: its read or send then fails.
  bool wait(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd fds[2] = {{connection_.fd, events, 0}, {server_.wake_[0], POLLIN, 0}};
      const int ready = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 60'000)));
      if (ready < 0 && errno != EINTR) return false;
      if (fds[1].revents != 0) return false;
      if (fds[0].revents != 0) return true;
    }
  }

  GuardedServer& server_;
  Connection& connection_;
  const Clock::time_point request_deadline_;
  std::optional<Clock::time_point> answering_;  // its deadline, from the first byte
  char buffer_[4096];
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

thread_local std::optional<GuardedServer::Connections::iterator> GuardedServer::serving_;
thread_local socket_t* GuardedServer::peek_into_ = nullptr;

GuardedServer::GuardedServer(ListenerLimits limits) : limits_(limits) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
  new_task_queue = [this] { return new Queue(*this, limits_.max_connections); };
  set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
    // The request line and headers have arrived. A GET or HEAD has no body to read: no longer a
    // reader to evict. Any other method's body is read after this (httplib reads it before it
    // routes), so it stays evictable while its body comes: a body trickled to any path would
    // otherwise hold a thread past every eviction. Its handler calls handling() once it runs.
    // This runs on the worker thread Queue set serving_ on.
    if (request.method == "GET" || request.method == "HEAD") handling();
    return request_check_ ? request_check_(request, response) : HandlerResponse::Unhandled;
  });
}

GuardedServer::~GuardedServer() {
  stop_now();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void GuardedServer::set_request_check(HandlerWithResponse check) {
  request_check_ = std::move(check);
}

bool GuardedServer::widen_backlog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

void GuardedServer::stop_now() {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      const char byte = 0;
      (void)!::write(wake_[1], &byte, 1);
    }
  }
  stop();
}

std::optional<GuardedServer::Connections::iterator> GuardedServer::admit(socket_t sock) {
  std::lock_guard lock(mutex_);
  if (stopping_) return std::nullopt;
  const auto kept = static_cast<std::size_t>(std::count_if(
      connections_.begin(), connections_.end(), [](const auto& c) { return !c.evicted; }));
  if (kept >= limits_.max_connections) {
    // Full: the oldest connection still reading its request, or still being sent its answer,
    // gives way. One that waits for a thread is closed now; one being served is shut down, and
    // its thread closes it at once. So at most twice the bound stay open (the evicted being
    // served, at most one per thread), and a burst does not turn scrapes away.
    const auto oldest = std::find_if(connections_.begin(), connections_.end(), [](const auto& c) {
      return !c.evicted && c.phase != Phase::handling;
    });
    if (oldest == connections_.end()) return std::nullopt;  // every one in a handler
    oldest->evicted = true;
    if (oldest->started) {
      ::shutdown(oldest->fd, SHUT_RDWR);  // listed: not closed yet, so still that socket
    } else {
      ::close(oldest->fd);  // its job only takes it off the list (begin())
    }
  }
  connections_.push_back(Connection{sock, Clock::now()});
  return std::prev(connections_.end());
}

bool GuardedServer::begin(Connections::iterator connection) {
  std::lock_guard lock(mutex_);
  if (connection->evicted && !connection->started) {
    connections_.erase(connection);
    return false;
  }
  connection->started = true;
  return true;
}

// Before the socket is closed: admit() shuts down only listed sockets, so never a descriptor
// number the next accept() reused.
void GuardedServer::leave(Connections::iterator connection) {
  std::lock_guard lock(mutex_);
  connections_.erase(connection);
}

void GuardedServer::handling() {
  if (serving_) enter(**serving_, Phase::handling);
}

void GuardedServer::enter(Connection& connection, Phase phase) {
  std::lock_guard lock(mutex_);
  connection.phase = phase;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  if (peek_into_ != nullptr) {  // Queue::socket_of()
    *peek_into_ = sock;
    return false;
  }
  bool served = false;
  if (serving_) {  // always, from Queue
    const Connections::iterator connection = *serving_;
    if (!begin(connection)) return false;  // evicted while it waited: closed then
    DeadlineStream stream(*this, *connection);
    bool closed = false;
    try {
      served = process_request(stream, true, closed, nullptr);
    } catch (...) {
      served = false;  // a connection's failure is that connection's
    }
    leave(connection);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return served;
}

}  // namespace outbox::observe
