// ThreadSanitizer builds only (OUTBOX_SANITIZE=thread): C11 <threads.h> functions that the TSan
// runtimes of GCC 12 and clang 14 do not intercept, forwarded to the pthread functions they do.
//
// librdkafka (Debian's 2.0.2) starts its threads with thrd_create and joins them with thrd_join.
// glibc's thrd_create calls its internal __pthread_create_2_1, not the exported pthread_create,
// so the runtime never sees the thread start: the thread has no TSan thread state, and its first
// intercepted call (a realloc in getaddrinfo on rdk:broker) dereferences a null allocator cache
// and the test dies with SIGSEGV inside the runtime before TSan reports anything. Defined in the
// executable, these definitions come first in symbol lookup, ahead of libc's, so librdkafka's
// calls land here and reach the runtime's pthread interceptors.
//
// The same holds for librdkafka's mutexes and condition variables (mtx_*, cnd_*, call_once): glibc
// implements them on its internal pthread functions, so without these forwards TSan would not
// see librdkafka's locking and would report as races accesses that its locks do order (between
// its threads, and on memory our code hands to it or gets from it). glibc's mtx_t, cnd_t and
// once_flag are pthread_mutex_t, pthread_cond_t and pthread_once_t under another name (same
// size, same initialisation), which is what glibc's own implementations of these rely on.
#include <pthread.h>
#include <threads.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <ctime>

namespace {

int thrd_result(int pthread_error) {
  switch (pthread_error) {
    case 0:
      return thrd_success;
    case EBUSY:
      return thrd_busy;
    case ETIMEDOUT:
      return thrd_timedout;
    case ENOMEM:
      return thrd_nomem;
    default:
      return thrd_error;
  }
}

struct C11Start {
  thrd_start_t func;
  void* arg;
};

void* run_c11_thread(void* raw) {
  C11Start start = *static_cast<C11Start*>(raw);
  std::free(raw);
  // As glibc's start_thread does for a C11 thread: the int result travels as the pointer value.
  return reinterpret_cast<void*>(static_cast<std::intptr_t>(start.func(start.arg)));
}

pthread_mutex_t* as_pthread(mtx_t* m) { return reinterpret_cast<pthread_mutex_t*>(m); }
pthread_cond_t* as_pthread(cnd_t* c) { return reinterpret_cast<pthread_cond_t*>(c); }

static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t));
static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t));
static_assert(sizeof(once_flag) == sizeof(pthread_once_t));
static_assert(sizeof(thrd_t) == sizeof(pthread_t));

}  // namespace

extern "C" {

int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) {
  auto* start = static_cast<C11Start*>(std::malloc(sizeof(C11Start)));
  if (start == nullptr) return thrd_nomem;
  *start = C11Start{func, arg};
  const int error = pthread_create(thr, nullptr, run_c11_thread, start);
  if (error != 0) std::free(start);
  return thrd_result(error);
}

int thrd_join(thrd_t thr, int* res) {
  void* value = nullptr;
  const int error = pthread_join(thr, &value);
  if (error == 0 && res != nullptr) *res = static_cast<int>(reinterpret_cast<std::intptr_t>(value));
  return thrd_result(error);
}

int thrd_detach(thrd_t thr) { return thrd_result(pthread_detach(thr)); }

int mtx_init(mtx_t* mutex, int type) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  if ((type & mtx_recursive) != 0) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  const int error = pthread_mutex_init(as_pthread(mutex), &attr);
  pthread_mutexattr_destroy(&attr);
  return thrd_result(error);
}

int mtx_lock(mtx_t* mutex) { return thrd_result(pthread_mutex_lock(as_pthread(mutex))); }

int mtx_trylock(mtx_t* mutex) { return thrd_result(pthread_mutex_trylock(as_pthread(mutex))); }

int mtx_timedlock(mtx_t* __restrict mutex, const struct timespec* __restrict time_point) {
  return thrd_result(pthread_mutex_timedlock(as_pthread(mutex), time_point));
}

int mtx_unlock(mtx_t* mutex) { return thrd_result(pthread_mutex_unlock(as_pthread(mutex))); }

void mtx_destroy(mtx_t* mutex) { pthread_mutex_destroy(as_pthread(mutex)); }

int cnd_init(cnd_t* cond) { return thrd_result(pthread_cond_init(as_pthread(cond), nullptr)); }

int cnd_signal(cnd_t* cond) { return thrd_result(pthread_cond_signal(as_pthread(cond))); }

int cnd_broadcast(cnd_t* cond) { return thrd_result(pthread_cond_broadcast(as_pthread(cond))); }

int cnd_wait(cnd_t* cond, mtx_t* mutex) {
  return thrd_result(pthread_cond_wait(as_pthread(cond), as_pthread(mutex)));
}

int cnd_timedwait(cnd_t* __restrict cond, mtx_t* __restrict mutex,
                  const struct timespec* __restrict time_point) {
  return thrd_result(pthread_cond_timedwait(as_pthread(cond), as_pthread(mutex), time_point));
}

void cnd_destroy(cnd_t* cond) { pthread_cond_destroy(as_pthread(cond)); }

void call_once(once_flag* flag, void (*func)(void)) {
  pthread_once(reinterpret_cast<pthread_once_t*>(flag), func);
}

}  // extern "C"
