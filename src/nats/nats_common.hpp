#pragma once
// nats.c handles and what the NATS sink, consumer and audit share: connecting with outbox's
// settings, subjects, and errors as text.

#include <nats/nats.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>

#include "common/holder.hpp"

namespace outbox::nats {

using OptionsHandle = detail::Holder<natsOptions, &natsOptions_Destroy>;
using ConnectionHandle = detail::Holder<natsConnection, &natsConnection_Destroy>;
using ContextHandle = detail::Holder<jsCtx, &jsCtx_Destroy>;
using MessageHandle = detail::Holder<natsMsg, &natsMsg_Destroy>;
using StreamInfoHandle = detail::Holder<jsStreamInfo, &jsStreamInfo_Destroy>;
using SubscriptionHandle = detail::Holder<natsSubscription, &natsSubscription_Destroy>;

// What a client connects with.
struct ConnectSettings {
  std::string servers;  // comma separated URLs
  std::string name;     // the connection's name in the server's monitoring
  std::chrono::milliseconds connect_timeout{2000};
  std::string credentials_file;
  std::string ca_file;
};

// natsOptions for `settings`: reconnects for ever (250 ms apart), retries a failed first connect
// in the background (connect() then returns at once). Throws ConfigError for a bad server list or
// file.
OptionsHandle make_options(const ConnectSettings& settings);

// nats.c runs a connection's callbacks (disconnected, reconnected, closed) on a thread of its own,
// in order. An object whose methods those callbacks call must not go before the closed callback
// ran: close the connection, then wait() for this (set with natsOptions_SetClosedCB, closure =
// this object). After it, no connection callback of that connection runs again.
class ClosedSignal {
 public:
  static void on_closed(natsConnection* /*connection*/, void* closure) {
    auto* self = static_cast<ClosedSignal*>(closure);
    const std::lock_guard lock(self->mutex_);
    self->closed_ = true;
    self->done_.notify_all();  // under the lock: the waiter cannot go on before this returns
  }
  // True when the callback ran within `limit`.
  bool wait(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return done_.wait_for(lock, limit, [this] { return closed_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool closed_ = false;
};

// Closes `connection` and waits (at most 5 s) for `closed`, its closed callback.
void close_and_wait(natsConnection* connection, ClosedSignal& closed);

// Connects; with `wait` false a server that is not up yet is no error (the client keeps trying).
// Throws BrokerError when it cannot connect and `wait` is true.
ConnectionHandle connect(natsOptions* options, bool wait);

// "<status text>: <nats.c's last error>" for a failed call.
std::string error_text(natsStatus status);

// Whether `status` says the server could not be reached (try again later), not that it refused.
bool is_transient(natsStatus status);

// Why `subject` cannot be published to (empty when it can): empty, an empty token, whitespace or
// a control character, or a wildcard.
std::string subject_problem(std::string_view subject);

// Whether every subject `filter` matches is matched by `pattern` (both may hold * and >).
bool subject_covers(std::string_view pattern, std::string_view filter);

// A header name a producer may not set on a NATS message: outbox's own and the server's
// ("Nats-" in any case).
bool is_reserved_nats_header(std::string_view name);

}  // namespace outbox::nats
