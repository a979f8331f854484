#include "outbox/discard_sink.hpp"

#include <thread>
#include <vector>

namespace outbox {

namespace {

class DiscardSink final : public Sink {
 public:
  void send(const Event& /*event*/, std::uint64_t ticket) override { ready_.push_back(ticket); }
  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    if (ready_.empty()) std::this_thread::sleep_for(max_wait);
    for (const std::uint64_t ticket : ready_) {
      reports.push_back(DeliveryReport{ticket, DeliveryOutcome::published, {}, -1, -1, {}});
    }
    ready_.clear();
  }
  [[nodiscard]] std::size_t in_flight() const override { return ready_.size(); }
  [[nodiscard]] std::string describe() const override { return "discard"; }

 private:
  std::vector<std::uint64_t> ready_;
};

}  // namespace

std::unique_ptr<Sink> make_discard_sink() { return std::make_unique<DiscardSink>(); }

}  // namespace outbox
