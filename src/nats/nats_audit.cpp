#include "outbox/nats_audit.hpp"

#include <fmt/format.h>

#include "nats/nats_common.hpp"
#include "ops/audit_rows.hpp"
#include "outbox/error.hpp"

namespace outbox {
namespace {

using MetaDataHandle = detail::Holder<jsMsgMetaData, &jsMsgMetaData_Destroy>;
constexpr int kFetch = 1000;

struct MessageList {
  natsMsgList list{nullptr, 0};
  ~MessageList() { natsMsgList_Destroy(&list); }
};

// The stream's state and configuration; InvalidArgument when it does not exist.
nats::StreamInfoHandle stream_info(jsCtx* js, const NatsAuditOptions& options) {
  jsStreamInfo* raw = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status = js_GetStreamInfo(&raw, js, options.stream.c_str(), nullptr, &code);
  nats::StreamInfoHandle info(raw);
  if (code == JSStreamNotFoundErr || status == NATS_NOT_FOUND) {
    // Not the server list: it may hold a password.
    throw InvalidArgument("audit: the stream " + options.stream +
                          " does not exist on the NATS server (--nats-servers, --nats-stream)");
  }
  if (status != NATS_OK) {
    throw BrokerError(
        "audit: cannot read stream " + options.stream + ": " + nats::error_text(status), 0, true);
  }
  return info;
}

// An ephemeral consumer over the whole stream from `from_ms` by time that acknowledges nothing
// (and that the server removes a minute after an audit that died).
nats::SubscriptionHandle subscribe_from(jsCtx* js, const jsStreamInfo& info,
                                        const NatsAuditOptions& options, std::int64_t from_ms) {
  jsSubOptions sub_options;
  jsSubOptions_Init(&sub_options);
  sub_options.Stream = options.stream.c_str();
  sub_options.Config.AckPolicy = js_AckNone;
  sub_options.Config.DeliverPolicy = js_DeliverByStartTime;
  sub_options.Config.OptStartTime = from_ms * 1000000;
  sub_options.Config.InactiveThreshold = 60LL * 1000000000;
  const std::string subject = info.Config->SubjectsLen == 1 ? info.Config->Subjects[0] : ">";
  natsSubscription* raw = nullptr;
  if (const natsStatus status =
          js_PullSubscribe(&raw, js, subject.c_str(), nullptr, nullptr, &sub_options, nullptr);
      status != NATS_OK) {
    throw BrokerError(
        "audit: cannot read stream " + options.stream + ": " + nats::error_text(status), 0, true);
  }
  return nats::SubscriptionHandle(raw);
}

// Appends every message up to sequence `last`, each with whether it was stored in the window.
void read_to(natsSubscription* subscription, std::uint64_t last, const NatsAuditOptions& options,
             std::int64_t begin_ms, std::int64_t end_ms, detail::AuditedMessages& messages) {
  const auto deadline = std::chrono::steady_clock::now() + options.read_timeout;
  for (std::uint64_t seen = 0; seen < last;) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw BrokerError(fmt::format("audit: stream {} not read to sequence {} within {} ms",
                                    options.stream, last, options.read_timeout.count()),
                        0, true);
    }
    MessageList batch;
    const natsStatus status =
        natsSubscription_Fetch(&batch.list, subscription, kFetch, 2000, nullptr);
    if (status == NATS_TIMEOUT) return;  // nothing after the last one read (deleted ones)
    if (status != NATS_OK) {
      throw BrokerError("audit: reading stream " + options.stream + ": " + nats::error_text(status),
                        0, true);
    }
    for (int i = 0; i < batch.list.Count && seen < last; ++i) {
      natsMsg* message = batch.list.Msgs[i];
      jsMsgMetaData* raw_meta = nullptr;
      if (natsMsg_GetMetaData(&raw_meta, message) != NATS_OK) continue;
      const MetaDataHandle meta(raw_meta);
      seen = meta->Sequence.Stream;
      if (seen > last) return;
      const char* id = nullptr;
      natsMsgHeader_Get(message, "event_id", &id);
      const std::int64_t at_ms = meta->Timestamp / 1000000;
      messages.emplace_back(EventId::parse(id != nullptr ? id : "").value_or(EventId{}),
                            at_ms >= begin_ms && at_ms < end_ms);
    }
  }
}

// The stream's messages from `from_ms` to its last one when this began.
detail::AuditedMessages read_stream(const NatsAuditOptions& options, std::int64_t from_ms,
                                    std::int64_t begin_ms, std::int64_t end_ms) {
  const nats::OptionsHandle settings = nats::make_options(
      nats::ConnectSettings{options.servers, "outbox-audit", std::chrono::milliseconds(2000),
                            options.credentials_file, options.ca_file});
  const nats::ConnectionHandle connection = nats::connect(settings.get(), true);
  jsCtx* raw_js = nullptr;
  if (natsConnection_JetStream(&raw_js, connection.get(), nullptr) != NATS_OK) {
    throw BrokerError("audit: cannot open a JetStream context", 0, true);
  }
  const nats::ContextHandle js(raw_js);
  const nats::StreamInfoHandle info = stream_info(js.get(), options);
  detail::AuditedMessages messages;
  if (info->State.Msgs == 0) return messages;
  const nats::SubscriptionHandle subscription = subscribe_from(js.get(), *info, options, from_ms);
  read_to(subscription.get(), info->State.LastSeq, options, begin_ms, end_ms, messages);
  natsSubscription_Unsubscribe(subscription.get());  // deletes the ephemeral consumer
  return messages;
}

}  // namespace

AuditReport audit_nats_stream(const NatsAuditOptions& options) {
  detail::check_audit_window(options);
  if (options.stream.empty()) throw InvalidArgument("audit needs the stream to read");
  return detail::run_audit(
      options, [](const Event&) { return true; },
      [&](std::int64_t from_ms, std::int64_t begin_ms, std::int64_t end_ms) {
        return read_stream(options, from_ms, begin_ms, end_ms);
      });
}

}  // namespace outbox
