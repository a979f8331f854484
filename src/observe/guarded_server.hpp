// The metrics listener's HTTP server: cpp-httplib with bounds a slow or hostile client cannot
// stretch (docs/OPERATIONS.md, "The metrics listener's limits").
//
// cpp-httplib 0.11 (Debian 12) times out each read of a request alone (5 s), not the request:
// a client that sends a byte every 4 s holds a worker for ever. Its thread pool queues every
// accepted connection without bound (each holds a descriptor), and its stop() waits for the
// workers, so for the slow clients too. Measured before this class: 20 trickling clients made
// 6 of 6 scrapes time out, kept a stop() waiting 19.6 s (until they stopped trickling), and 300
// held connections kept 297 descriptors.

#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>

namespace outbox::observe {

struct ListenerLimits {
  // Connections kept at once, a thread each. One more evicts the oldest that is still reading
  // its request (or still being sent its answer): a slow client gives its place up to a new
  // one, and a scrape, whose request comes at once, is never the oldest reader for long. When
  // none can give way (all in a handler), the new connection is answered 503 and closed, not
  // queued. At most twice this many descriptors: the evicted stay open until their thread
  // notices, at once.
  std::size_t max_connections;
  // From the connection's start until its whole request has arrived, however it trickles.
  std::chrono::milliseconds request_deadline;
  // From the first byte of the answer until its last is sent (a client that does not read).
  std::chrono::milliseconds response_deadline;
};

// Sixteen: two Prometheus replicas, a prober and the admin page use a few; the rest are room a
// slow client is evicted from. Five seconds for a request that takes a scraper a millisecond.
inline constexpr ListenerLimits kListenerLimits{16, std::chrono::seconds(5),
                                                std::chrono::seconds(10)};

// An httplib::Server that serves one request per connection within ListenerLimits, and whose
// stop_now() ends every connection's wait at once.
//
// Thread safety: configure (routes, set_request_check) before listen_after_bind(); stop_now()
// from any thread. Do not call set_pre_routing_handler(): this class uses it (set_request_check
// is its replacement).
class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(ListenerLimits limits);
  ~GuardedServer() override;
  GuardedServer(const GuardedServer&) = delete;
  GuardedServer& operator=(const GuardedServer&) = delete;

  // What the pre-routing handler was: runs once the request line and headers have arrived.
  void set_request_check(HandlerWithResponse check);

  // After bind_to_port(): lets the kernel queue `backlog` connections not yet accepted.
  // httplib's is 5: a burst of more (a slowloris opening its connections) drops the next SYNs,
  // and a scrape among them waits for the client's retransmit, 1 s and more. Linux takes a
  // second listen() on a listening socket as a new backlog. False when not bound.
  bool widen_backlog(int backlog);

  // From a handler of a request with a body (POST), once it runs: its body has arrived, and the
  // connection is no longer a reader to evict. GET and HEAD handlers need not call it.
  void handling();

  // Wakes every connection (each is closed without its answer), then stops the accept loop; the
  // listening thread returns as soon as the handlers running now return. Blocks for nothing.
  void stop_now();

 private:
  enum class Phase { reading, handling, answering };
  struct Connection {
    socket_t fd;
    std::chrono::steady_clock::time_point accepted;
    Phase phase = Phase::reading;
    bool started = false;  // a thread serves it (else it waits in the queue)
    bool evicted = false;  // shut down (started) or closed (waiting) to make room
  };
  using Connections = std::list<Connection>;
  class Queue;
  class DeadlineStream;

  bool process_and_close_socket(socket_t sock) override;
  // Lists an accepted socket, or nothing when there is no room (stopping, full).
  std::optional<Connections::iterator> admit(socket_t sock);
  // On the worker thread: whether to serve it; false (and off the list) when it was evicted
  // and closed while it waited.
  bool begin(Connections::iterator connection);
  void leave(Connections::iterator connection);
  void enter(Connection& connection, Phase phase);

  // The connection this worker thread serves (a worker serves one server's only), and where
  // Queue asks process_and_close_socket() to put its socket instead of serving it.
  static thread_local std::optional<Connections::iterator> serving_;
  static thread_local socket_t* peek_into_;

  const ListenerLimits limits_;
  HandlerWithResponse request_check_;
  int wake_[2] = {-1, -1};  // a pipe: a byte in it once stopping, never read, so every poll sees it
  mutable std::mutex mutex_;
  Connections connections_;  // queued or served, oldest first (under mutex_)
  bool stopping_ = false;    // under mutex_
};

}  // namespace outbox::observe
