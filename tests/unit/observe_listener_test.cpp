// The metrics listener (ObserveServer, `--metrics-listen`, `outbox admin --listen`) against slow
// and many clients: a slowloris must not starve the scrapes and probes, hold up a stop, or use
// up the process's file descriptors (docs/GUARANTEES.md, hostile inputs). No database: the
// server watches nothing and serves /healthz and /metrics from memory.

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "observe/guarded_server.hpp"
#include "outbox/observe.hpp"

namespace outbox {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int open_descriptors() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory's own
}

constexpr std::string_view kHeaderThatNeverEnds = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";

// A client that connects and sends the start of a request, never its end.
class SlowClient {
 public:
  explicit SlowClient(std::uint16_t port, std::string_view opening = kHeaderThatNeverEnds)
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 &&
                 ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    send(opening);
  }
  ~SlowClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  SlowClient(const SlowClient&) = delete;
  SlowClient& operator=(const SlowClient&) = delete;

  bool connected() const { return connected_; }
  // One more byte of a header that never ends: a server that times out each read alone, not
  // the request, never gives up on it.
  void trickle() { send("x"); }
  // Whether the server closed the connection (its end read, or a reset), past any answer.
  bool closed_by_server() const {
    char buffer[512];
    for (;;) {
      const ssize_t got = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (got > 0) continue;
      return got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
  }

 private:
  void send(std::string_view text) {
    if (connected_) (void)::send(fd_, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  int fd_;
  bool connected_ = false;
};

// Slow clients that trickle a byte each every 200 ms, for at most `for_at_most` (so a server
// that waits for them is seen waiting, not hung for ever).
class Slowloris {
 public:
  Slowloris(std::uint16_t port, int clients, std::chrono::seconds for_at_most,
            std::string_view opening = kHeaderThatNeverEnds) {
    for (int i = 0; i < clients; ++i) {
      clients_.push_back(std::make_unique<SlowClient>(port, opening));
    }
    thread_ = std::thread([this, for_at_most] {
      const auto end = Clock::now() + for_at_most;
      while (!done_ && Clock::now() < end) {
        for (auto& client : clients_) client->trickle();
        std::this_thread::sleep_for(200ms);
      }
    });
  }
  ~Slowloris() {
    done_ = true;
    thread_.join();
  }
  Slowloris(const Slowloris&) = delete;
  Slowloris& operator=(const Slowloris&) = delete;

  int connected() const {
    int n = 0;
    for (const auto& client : clients_) n += client->connected() ? 1 : 0;
    return n;
  }

 private:
  std::vector<std::unique_ptr<SlowClient>> clients_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

ObserveOptions memory_only() {
  ObserveOptions options;
  options.listen = "127.0.0.1:0";
  options.backlog = false;
  return options;
}

// How long GET `path` took to answer 200, or a failure.
::testing::AssertionResult answers_within(std::uint16_t port, const std::string& path,
                                          double bound_seconds) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(10, 0);
  const auto start = Clock::now();
  const auto response = client.Get(path.c_str());
  const double took = seconds_since(start);
  if (!response) {
    return ::testing::AssertionFailure()
           << path << " gave no answer (" << httplib::to_string(response.error()) << ") after "
           << took << " s";
  }
  if (response->status != 200) {
    return ::testing::AssertionFailure() << path << " answered " << response->status;
  }
  if (took > bound_seconds) {
    return ::testing::AssertionFailure()
           << path << " took " << took << " s, more than " << bound_seconds << " s";
  }
  return ::testing::AssertionSuccess();
}

// Twenty trickling clients (more than a scrape needs workers for) and the probes still answer at
// once, several times over.
TEST(MetricsListener, SlowClientsDoNotStarveTheScrapesAndProbes) {
  ObserveServer server(memory_only());
  server.start();
  const Slowloris slow(server.port(), 20, 15s);
  ASSERT_EQ(slow.connected(), 20);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(answers_within(server.port(), "/healthz", 2.0));
    EXPECT_TRUE(answers_within(server.port(), "/metrics", 2.0));
  }
}

// The same with complete headers and a body that trickles (httplib reads a body after the
// headers, for any method but GET): once 20 such connections held every thread past eviction, and
// a liveness probe failed. A body to a path that takes none is refused before it is read; one to
// an admin action may come slowly, and gives its place up like a slow header.
TEST(MetricsListener, SlowBodiesDoNotStarveTheScrapesAndProbes) {
  ObserveServer server(memory_only());
  server.start();
  const Slowloris probes(server.port(), 10, 15s,
                         "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Length: 65000\r\n\r\n");
  const Slowloris actions(server.port(), 10, 15s,
                          "POST /api/quarantine/skip HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "X-Outbox-Admin: 1\r\nContent-Type: application/json\r\n"
                          "Content-Length: 65000\r\n\r\n{");
  ASSERT_EQ(probes.connected() + actions.connected(), 20);
  std::this_thread::sleep_for(300ms);  // their headers are in; they trickle their bodies
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(answers_within(server.port(), "/healthz", 2.0));
    EXPECT_TRUE(answers_within(server.port(), "/metrics", 2.0));
  }
  httplib::Client client("127.0.0.1", server.port());
  const auto refused = client.Post("/healthz", "x", "text/plain");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 405);
}

// stop() (SIGTERM) closes the slow clients' connections instead of waiting for their requests.
TEST(MetricsListener, StopDoesNotWaitForSlowClients) {
  ObserveServer server(memory_only());
  server.start();
  const Slowloris slow(server.port(), 20, 15s);
  ASSERT_EQ(slow.connected(), 20);
  std::this_thread::sleep_for(300ms);  // what a stop meets: every worker holding a slow client
  const auto start = Clock::now();
  server.stop();
  EXPECT_LT(seconds_since(start), 2.0) << "stop() waited for the slow clients";
}

// Held connections far beyond the bound: the listener keeps a bounded number of descriptors
// (the rest are closed, not queued), so the process still has descriptors for its database
// sockets; and a scrape still gets through.
TEST(MetricsListener, ManyHeldConnectionsKeepABoundedNumberOfDescriptors) {
  ObserveServer server(memory_only());
  server.start();
  const int before = open_descriptors();
  constexpr int kHeld = 300;
  const Slowloris slow(server.port(), kHeld, 15s);
  ASSERT_EQ(slow.connected(), kHeld);
  // Accepted in order: once a later connection is answered, every held one was accepted.
  EXPECT_TRUE(answers_within(server.port(), "/healthz", 2.0));
  const int listener_holds = open_descriptors() - before - kHeld;
  EXPECT_LE(listener_holds, 2 * static_cast<int>(observe::kListenerLimits.max_connections) + 4)
      << "the listener holds " << listener_holds << " descriptors for " << kHeld
      << " slow connections";
}

// httplib 0.11 times out each read alone: a byte every 200 ms kept a request open for ever. The
// whole request has a deadline (here 300 ms; kListenerLimits: 5 s).
TEST(MetricsListener, ARequestThatTricklesIsCutAtItsDeadline) {
  observe::GuardedServer server({4, 300ms, 300ms});
  server.Get("/metrics", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("up 1\n", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listening([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(1ms);
  SlowClient slow(static_cast<std::uint16_t>(port));
  ASSERT_TRUE(slow.connected());
  const auto start = Clock::now();
  while (!slow.closed_by_server() && seconds_since(start) < 5) {
    slow.trickle();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_LT(seconds_since(start), 2.0) << "the trickling request was not cut at its deadline";
  server.stop_now();
  listening.join();
}

// A token does not lift the Host check on loopback: the probes need no token, and there they
// name what failed, which a web page reaching 127.0.0.1 by DNS rebinding must not read.
TEST(MetricsListener, OnLoopbackAForeignHostIsRefusedWithATokenToo) {
  ObserveOptions options = memory_only();
  options.token = "0123456789abcdef0123";
  ObserveServer server(options);
  server.start();
  httplib::Client client("127.0.0.1", server.port());
  const auto rebound = client.Get("/readyz", {{"Host", "rebound.example:9464"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
  EXPECT_TRUE(answers_within(server.port(), "/readyz", 2.0));  // Host 127.0.0.1: answered
}

}  // namespace
}  // namespace outbox
