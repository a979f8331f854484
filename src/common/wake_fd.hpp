#pragma once
// An eventfd that one side makes readable (signal(), or another library writing kPayload to it)
// and the waiting side clears: a wake-up a poll() can wait on beside sockets.

#include <cstdint>

namespace outbox::detail {

class WakeFd {
 public:
  // What a writer writes: an eventfd takes 8 bytes, the count to add.
  static constexpr std::uint64_t kOne = 1;

  WakeFd();  // throws std::system_error when the kernel refuses an eventfd
  ~WakeFd();
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;

  [[nodiscard]] int fd() const noexcept { return fd_; }
  void signal() const noexcept;  // readable from now until clear()
  void clear() const noexcept;

 private:
  int fd_;
};

}  // namespace outbox::detail
