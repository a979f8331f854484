#include "common/wake_fd.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace outbox::detail {

WakeFd::WakeFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

WakeFd::~WakeFd() { ::close(fd_); }

// A write fails only when the count would overflow (it is readable then) or the fd is bad.
void WakeFd::signal() const noexcept {
  [[maybe_unused]] const auto written = ::write(fd_, &kOne, sizeof(kOne));
}

// One read takes the whole count (not EFD_SEMAPHORE); EAGAIN: it was not readable.
void WakeFd::clear() const noexcept {
  std::uint64_t count = 0;
  [[maybe_unused]] const auto read = ::read(fd_, &count, sizeof(count));
}

}  // namespace outbox::detail
