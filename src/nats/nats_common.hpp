#pragma once
// nats.c handles and what the NATS sink, consumer and audit share: connecting with outbox's
// settings, subjects, and errors as text.

#include <nats/nats.h>

#include <chrono>
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

// A header name a producer may not set on a NATS message: outbox's own and the server's
// ("Nats-" in any case).
bool is_reserved_nats_header(std::string_view name);

}  // namespace outbox::nats
