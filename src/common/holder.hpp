#pragma once
// One RAII owner for every C handle (PGconn, PGresult, rd_kafka_t, ...): move-only, destroys with
// the C library's own function. One alias per C type lives next to the code that uses it.

#include <memory>

namespace outbox::detail {

template <typename T, auto Destroy>
struct HandleDeleter {
  void operator()(T* handle) const noexcept {
    if (handle != nullptr) Destroy(handle);
  }
};

template <typename T, auto Destroy>
using Holder = std::unique_ptr<T, HandleDeleter<T, Destroy>>;

}  // namespace outbox::detail
