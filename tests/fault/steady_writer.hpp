#pragma once
// A writer for the campaigns that check a destination's effects (HTTP, NATS): one event per
// transaction, about 100 a second, round robin over `aggregates` aggregates "acct-<n>", in a
// thread of this process; it keeps the ids of the events whose COMMIT succeeded.

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "fault/workers.hpp"
#include "outbox/producer.hpp"
#include "outbox/transaction.hpp"
#include "pg/connection.hpp"

namespace outbox::campaign {

using namespace std::chrono_literals;

// Commits one event per transaction, round robin over the aggregates, until told to stop; keeps
// the ids of those whose COMMIT succeeded.
class Writer {
 public:
  Writer(std::string url, int aggregates)
      : url_(std::move(url)), aggregates_(aggregates), thread_([this] { run(); }) {}
  ~Writer() { stop(); }
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] const std::set<std::string>& committed() const { return committed_; }

 private:
  void run() {
    auto connection = pg::Connection::open(url_, "campaign-writer");
    const Producer producer(ProducerOptions{SchemaName(kSchema)});
    for (int i = 0; !stopping_; ++i) {
      pg::exec(connection.get(), "BEGIN");
      const auto written =
          producer.enqueue(connection.get(), NewEvent{"account",
                                                      fmt::format("acct-{}", i % aggregates_),
                                                      "Charged",
                                                      fmt::format(R"({{"n":{}}})", i),
                                                      "{}",
                                                      1,
                                                      {}});
      pg::commit(connection.get());
      committed_.insert(written.event_id.to_string());
      std::this_thread::sleep_for(10ms);  // about 100 events a second
    }
  }
  std::string url_;
  int aggregates_;
  std::atomic<bool> stopping_{false};
  std::set<std::string> committed_;
  std::thread thread_;
};

}  // namespace outbox::campaign
