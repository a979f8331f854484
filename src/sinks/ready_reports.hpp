#pragma once
// The reports a sink's worker has ready for poll(), with the descriptor Sink::wake_fd() hands out
// readable exactly while there are any: one write when the list stops being empty, one read when
// poll() takes everything. The sink holds its own lock around every call (the worker adds, the
// relay's thread takes), so no report can fall between the two.

#include <cstddef>
#include <utility>
#include <vector>

#include "common/wake_fd.hpp"
#include "outbox/sink.hpp"

namespace outbox::detail {

class ReadyReports {
 public:
  void add(DeliveryReport report) {
    if (items_.empty()) wake_.signal();
    items_.push_back(std::move(report));
  }
  // Appends every ready report to `out`; returns how many.
  std::size_t take_into(std::vector<DeliveryReport>& out) {
    const std::size_t taken = items_.size();
    if (taken == 0) return 0;
    for (DeliveryReport& report : items_) out.push_back(std::move(report));
    items_.clear();
    wake_.clear();
    return taken;
  }
  [[nodiscard]] bool empty() const { return items_.empty(); }
  [[nodiscard]] std::size_t size() const { return items_.size(); }
  [[nodiscard]] int fd() const { return wake_.fd(); }

 private:
  std::vector<DeliveryReport> items_;
  WakeFd wake_;
};

}  // namespace outbox::detail
