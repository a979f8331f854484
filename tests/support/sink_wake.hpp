#pragma once
// Sink::wake_fd's contract on a sink with a worker of its own (HTTP, NATS): its descriptor turns
// readable when a report is ready, without poll() being called, and poll() that takes the report
// leaves it unreadable. Otherwise a relay waiting on it beside its change stream would sleep
// through reports (until its 5 ms bound) or spin.

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "outbox/sink.hpp"

namespace outbox::testing {

inline bool wake_fd_readable(int fd, std::chrono::milliseconds wait) {
  pollfd ready{fd, POLLIN, 0};
  return ::poll(&ready, 1, static_cast<int>(wait.count())) == 1 && (ready.revents & POLLIN) != 0;
}

// `first` and `second` must be events the sink publishes (two rounds: a sink that signals only
// once fails the second).
inline void expect_wake_fd_follows_reports(Sink& sink, const Event& first, const Event& second) {
  using namespace std::chrono_literals;
  const int fd = sink.wake_fd();
  ASSERT_GE(fd, 0) << "the sink offers no descriptor";
  EXPECT_FALSE(wake_fd_readable(fd, 0ms)) << "readable with nothing sent";
  std::uint64_t ticket = 7;
  for (const Event* event : {&first, &second}) {
    sink.send(*event, ticket);
    ASSERT_TRUE(wake_fd_readable(fd, 30s)) << "ticket " << ticket << ": never readable";
    std::vector<DeliveryReport> reports;
    sink.poll(0ms, reports);
    ASSERT_EQ(reports.size(), 1U) << "readable, and poll() had no report";
    EXPECT_EQ(reports[0].ticket, ticket);
    EXPECT_EQ(reports[0].outcome, DeliveryOutcome::published) << reports[0].error;
    EXPECT_FALSE(wake_fd_readable(fd, 0ms)) << "poll() took the report and left it readable";
    ++ticket;
  }
}

}  // namespace outbox::testing
