#include "outbox/nats_sink.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/ascii_case.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "common/stat_list.hpp"
#include "nats/nats_common.hpp"
#include "nats/nats_stream.hpp"
#include "outbox/error.hpp"
#include "sinks/cloudevents.hpp"
#include "sinks/key_template.hpp"
#include "sinks/ready_reports.hpp"

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kMaxPartitions = 4096;
// A send the library never reported is given up this long after its ack timeout (a backstop:
// nats.c times out a pending publish itself).
constexpr std::chrono::seconds kBackstop{2};

void check_options(const NatsSinkOptions& options) {
  const std::string& tmpl = options.subject_template;
  detail::check_key_template(tmpl, "NATS subject", "--nats-partitions",
                             "outbox.{aggregate_type}.{partition}");
  Event probe;
  probe.aggregate_type = "x";
  probe.event_type = "x";
  if (const auto problem = nats::subject_problem(detail::render_key(tmpl, probe, 1));
      !problem.empty()) {
    throw ConfigError("NATS subject template \"" + detail::printable(tmpl, 300) +
                      "\" is not a subject to publish to: filled in, it " + problem +
                      "; e.g. outbox.{aggregate_type}.{partition}");
  }
  if (options.partitions < 1 || options.partitions > kMaxPartitions) {
    throw ConfigError(fmt::format("NATS: partitions must be 1 to {}, not {}", kMaxPartitions,
                                  options.partitions));
  }
  if (options.stream.empty() || nats::subject_problem(options.stream).size() > 0 ||
      options.stream.find('.') != std::string::npos) {
    throw ConfigError("NATS stream name \"" + detail::printable(options.stream, 100) +
                      "\" is not usable: give a name without dots, spaces or wildcards");
  }
  if (options.ack_timeout.count() <= 0) {
    throw ConfigError("NATS: the ack timeout must be above 0");
  }
  if (options.max_ack_timeout.count() > 0 && options.ack_timeout >= options.max_ack_timeout) {
    throw ConfigError(fmt::format(
        "NATS: the ack timeout ({} ms) must end before the claim's lease ({} ms), or another "
        "relay could publish the event and its successor first; lower --nats-ack-timeout or "
        "raise --lease-ms",
        options.ack_timeout.count(), options.max_ack_timeout.count()));
  }
}

// The NATS sink's own statistics (outbox/stats.hpp; Sink::stats()).
#define OUTBOX_NATS_SINK_STATS(X)                                                                \
  X(nats_duplicates, counter, when_set, "outbox_relay_nats_duplicates_total",                    \
    "{} NATS duplicate(s) suppressed",                                                           \
    "PubAcks marked duplicate: the stream already held the event id (a resend after an unknown " \
    "outcome), so it stored nothing; counted as published.")                                     \
  X(nats_ack_timeouts, counter, when_set, "outbox_relay_nats_ack_timeouts_total",                \
    "{} NATS ack timeout(s)",                                                                    \
    "Sends with no PubAck within the ack timeout: unknown outcomes, sent again with the same "   \
    "Nats-Msg-Id.")                                                                              \
  X(nats_publish_errors, counter, when_set, "outbox_relay_nats_publish_errors_total",            \
    "{} NATS publish error(s)",                                                                  \
    "Publishes the server refused (no stream for the subject, another stream, a limit).")        \
  X(nats_reconnects, counter, when_set, "outbox_relay_nats_reconnects_total",                    \
    "NATS reconnected {} time(s)", "Times the client reconnected to a NATS server.")

class NatsSink final : public Sink {
 public:
  explicit NatsSink(const NatsSinkOptions& options) : options_(options) {
    check_options(options_);
    nats::OptionsHandle settings = nats::make_options(
        nats::ConnectSettings{options.servers, "outbox-relay", options.connect_timeout,
                              options.credentials_file, options.ca_file});
    natsOptions_SetReconnectedCB(settings.get(), &NatsSink::on_reconnected, this);
    natsOptions_SetClosedCB(settings.get(), &nats::ClosedSignal::on_closed, &closed_);
    settings_ = std::move(settings);
    connection_ = nats::connect(settings_.get(), false);
    jsOptions js_options;
    jsOptions_Init(&js_options);
    js_options.Wait = options.ack_timeout.count();
    js_options.PublishAsync.AckHandler = &NatsSink::on_ack;
    js_options.PublishAsync.AckHandlerClosure = this;
    js_options.PublishAsync.MaxPending = 1 << 20;  // the relay bounds what is in flight
    jsCtx* js = nullptr;
    if (const natsStatus status = natsConnection_JetStream(&js, connection_.get(), &js_options);
        status != NATS_OK) {
      throw BrokerError("NATS: cannot open a JetStream context: " + nats::error_text(status), 0,
                        false);
    }
    js_.reset(js);
  }

  ~NatsSink() override {
    // Whatever is still pending has no relay left to record it: its rows are retaken after their
    // lease. The ack handler must not run once this object is gone: what nats.c still holds is
    // taken back from it (no handler runs for those), a handler already running is waited for,
    // and the connection's own callbacks end with its closed callback.
    jsPubOptions wait;
    jsPubOptions_Init(&wait);
    wait.MaxWait = 2000;
    if (js_PublishAsyncComplete(js_.get(), &wait) != NATS_OK) {
      natsMsgList taken{nullptr, 0};
      if (js_PublishAsyncGetPendingList(&taken, js_.get()) == NATS_OK) natsMsgList_Destroy(&taken);
      // nats.c counts a message pending until its handler has returned (js.c, _handleAsyncReply,
      // 3.4.1) and no longer counts what the list took: this returns once the handlers already
      // running have, which in_ack_handler_ alone could miss (a handler not yet counted there).
      (void)js_PublishAsyncComplete(js_.get(), &wait);
    }
    for (int i = 0; i < 100 && in_ack_handler_.load() > 0; ++i) nats_Sleep(10);
    nats::close_and_wait(connection_.get(), closed_);
    js_.reset();
    connection_.reset();
  }

  void send(const Event& event, std::uint64_t ticket) override {
    const std::string subject =
        detail::render_key(options_.subject_template, event, options_.partitions);
    if (const std::string problem = nats::subject_problem(subject); !problem.empty()) {
      report(ticket, DeliveryOutcome::permanent_failure,
             fmt::format("NATS subject \"{}\" rendered from the event {}", subject, problem));
      return;
    }
    if (natsConnection_IsClosed(connection_.get())) {
      // nats.c gives a connection up for good only after repeated authorization errors or a
      // server's -ERR; no retry of ours would reopen it.
      throw ConfigError(
          "NATS: the connection was closed for good (repeated authorization "
          "errors, or an error from the server): check --nats-credentials-file "
          "and the server's log");
    }
    if (const std::string not_ready = stream_not_ready(); !not_ready.empty()) {
      report(ticket, DeliveryOutcome::retryable_failure, "NATS: " + not_ready);
      return;
    }
    natsMsg* raw = nullptr;
    natsStatus status = natsMsg_Create(&raw, subject.c_str(), nullptr, event.payload.data(),
                                       static_cast<int>(event.payload.size()));
    nats::MessageHandle message(raw);
    if (status == NATS_OK) status = set_headers(message.get(), event);
    const std::string id = event.event_id.to_string();
    if (status == NATS_OK) {
      const std::lock_guard lock(mutex_);
      if (const auto old = pending_.find(id); old != pending_.end()) {
        ready_.add(DeliveryReport{old->second.ticket,
                                  DeliveryOutcome::unknown,
                                  "superseded by a new send of the same event",
                                  -1,
                                  -1,
                                  {}});
      }
      pending_[id] = Pending{ticket, Clock::now() + options_.ack_timeout + kBackstop};
    }
    jsPubOptions publish;
    jsPubOptions_Init(&publish);
    publish.MsgId = id.c_str();
    publish.ExpectStream = options_.stream.c_str();
    publish.MaxWait = options_.ack_timeout.count();
    natsMsg* owned = message.release();
    if (status == NATS_OK) status = js_PublishMsgAsync(js_.get(), &owned, &publish);
    natsMsg_Destroy(owned);  // no-op when the library took it
    if (status != NATS_OK) {
      const std::lock_guard lock(mutex_);
      pending_.erase(id);
      const bool permanent = status == NATS_MAX_PAYLOAD || status == NATS_INVALID_SUBJECT;
      ready_.add(DeliveryReport{
          ticket,
          permanent ? DeliveryOutcome::permanent_failure : DeliveryOutcome::retryable_failure,
          "NATS publish to " + subject + " refused: " + nats::error_text(status),
          -1,
          -1,
          {}});
    }
  }

  [[nodiscard]] int wake_fd() const override { return ready_.fd(); }

  void poll(std::chrono::milliseconds max_wait, std::vector<DeliveryReport>& reports) override {
    std::unique_lock lock(mutex_);
    woken_.wait_for(lock, max_wait, [&] { return !ready_.empty(); });
    // Overdue sends are reported only here, inside poll(): nothing woke the relay for them before
    // (its wait for reports is bounded: 5 ms).
    expire_overdue(Clock::now());
    ready_.take_into(reports);
  }

  [[nodiscard]] std::size_t in_flight() const override {
    const std::lock_guard lock(mutex_);
    return pending_.size() + ready_.size();
  }
  [[nodiscard]] std::string describe() const override { return "nats(" + options_.stream + ")"; }
  [[nodiscard]] std::vector<StatSample> stats() const override {
    return OUTBOX_STAT_SAMPLES(OUTBOX_NATS_SINK_STATS, counters_, detail::kRelaxed);
  }

 private:
  // Empty when the stream was checked since the last (re)connect; else why it is not ready. The
  // server is asked at most once a second meanwhile: each ask waits up to 2 s for an answer, and a
  // relay that claimed many rows must not wait that long for each.
  std::string stream_not_ready() {
    const std::uint64_t generation = connects_.load();
    if (checked_for_ == generation) return {};
    const auto now = Clock::now();
    if (now < next_stream_check_) return last_stream_problem_;
    last_stream_problem_ = nats::ensure_stream(
        js_.get(),
        nats::StreamRequirements{options_.stream, options_.subject_template, options_.create_stream,
                                 options_.allow_memory_storage, options_.longest_retry});
    if (last_stream_problem_.empty()) {
      checked_for_ = generation;  // a reconnect meanwhile moved connects_ on: checked again
    } else {
      next_stream_check_ = now + std::chrono::seconds(1);
    }
    return last_stream_problem_;
  }

  struct Pending {
    std::uint64_t ticket = 0;
    Clock::time_point give_up{};
  };

  natsStatus set_headers(natsMsg* message, const Event& event) const {
    const auto add = [&](const char* name, const std::string& value) {
      return natsMsgHeader_Add(message, name, value.c_str());
    };
    natsStatus status = add("event_id", event.event_id.to_string());
    if (status == NATS_OK) status = add("event_type", event.event_type);
    if (status == NATS_OK) status = add("aggregate_type", event.aggregate_type);
    if (status == NATS_OK) status = add("aggregate_id", event.aggregate_id);
    if (status == NATS_OK)
      status = add("aggregate_sequence", std::to_string(event.aggregate_sequence));
    if (status == NATS_OK) status = add("schema_version", std::to_string(event.schema_version));
    if (!options_.cloudevents_source.empty()) {
      for (const auto& [name, value] :
           detail::cloudevents_attributes(event, options_.cloudevents_source)) {
        if (status == NATS_OK) status = add(("ce-" + name).c_str(), value);
      }
      if (status == NATS_OK) status = add("content-type", "application/json");
    }
    if (status != NATS_OK || event.headers.empty() || event.headers == "{}") return status;
    const auto extra = nlohmann::json::parse(event.headers, nullptr, false);
    if (!extra.is_object()) return status;
    for (const auto& [key, value] : extra.items()) {
      if (!value.is_string() || nats::is_reserved_nats_header(key) || key == "aggregate_id") {
        continue;
      }
      const std::string lower = detail::ascii_lower(key);
      if (!options_.cloudevents_source.empty() &&
          (lower.starts_with("ce-") || lower == "content-type")) {
        continue;
      }
      const auto& text = value.get_ref<const std::string&>();
      // A header line cannot hold CR or LF: such a header is left out, never split.
      if (key.find_first_of("\r\n:") != std::string::npos ||
          text.find_first_of("\r\n") != std::string::npos) {
        continue;
      }
      if (status == NATS_OK) status = natsMsgHeader_Add(message, key.c_str(), text.c_str());
    }
    return status;
  }

  static void on_ack(jsCtx* /*js*/, natsMsg* message, jsPubAck* ack, jsPubAckErr* error,
                     void* closure) {
    auto* self = static_cast<NatsSink*>(closure);
    ++self->in_ack_handler_;
    struct Leave {
      NatsSink* self;
      ~Leave() { --self->in_ack_handler_; }
    } leave{self};
    const char* id = nullptr;
    natsMsgHeader_Get(message, "event_id", &id);
    const std::string subject = natsMsg_GetSubject(message) ? natsMsg_GetSubject(message) : "";
    self->settle(id == nullptr ? std::string() : std::string(id), subject, ack, error);
    natsMsg_Destroy(message);
  }

  void settle(const std::string& id, const std::string& subject, const jsPubAck* ack,
              const jsPubAckErr* error) {
    const std::lock_guard lock(mutex_);
    const auto it = pending_.find(id);
    if (it == pending_.end()) return;  // given up already: that report stands
    const std::uint64_t ticket = it->second.ticket;
    pending_.erase(it);
    if (ack != nullptr) {
      if (ack->Duplicate) counters_.nats_duplicates.fetch_add(1, std::memory_order_relaxed);
      ready_.add(DeliveryReport{ticket,
                                DeliveryOutcome::published,
                                {},
                                -1,
                                static_cast<std::int64_t>(ack->Sequence),
                                {}});
    } else {
      ready_.add(classify(ticket, subject, error));
    }
    woken_.notify_one();
  }

  DeliveryReport classify(std::uint64_t ticket, const std::string& subject,
                          const jsPubAckErr* error) {
    DeliveryReport report{ticket, DeliveryOutcome::retryable_failure, {}, -1, -1, {}};
    const std::string text = error != nullptr && error->ErrText != nullptr ? error->ErrText : "";
    const natsStatus status = error != nullptr ? error->Err : NATS_ERR;
    const int code = error != nullptr ? static_cast<int>(error->ErrCode) : 0;
    if (status == NATS_TIMEOUT) {
      counters_.nats_ack_timeouts.fetch_add(1, std::memory_order_relaxed);
      report.outcome = DeliveryOutcome::unknown;
      report.error =
          fmt::format("no PubAck for {} within {} ms", subject, options_.ack_timeout.count());
      return report;
    }
    if (status == NATS_NO_RESPONDERS) {
      counters_.nats_publish_errors.fetch_add(1, std::memory_order_relaxed);
      report.error = fmt::format(
          "no stream takes subject {} (stream {} must list it, and JetStream must be enabled)",
          subject, options_.stream);
      return report;
    }
    if (code == 0) {  // the connection, not the server: it may have stored the message
      report.outcome = DeliveryOutcome::unknown;
      report.error = fmt::format("NATS publish to {}: {}", subject, natsStatus_GetText(status));
      return report;
    }
    counters_.nats_publish_errors.fetch_add(1, std::memory_order_relaxed);
    if (code == JSStreamMessageExceedsMaximumErr)
      report.outcome = DeliveryOutcome::permanent_failure;
    report.error =
        code == JSStreamNotMatchErr
            ? fmt::format("subject {} belongs to another stream than {}", subject, options_.stream)
            : fmt::format("NATS refused {} (JetStream error {}): {}", subject, code, text);
    return report;
  }

  // Reports every send the library left unanswered past its ack timeout and the backstop.
  void expire_overdue(Clock::time_point now) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.give_up > now) {
        ++it;
        continue;
      }
      counters_.nats_ack_timeouts.fetch_add(1, std::memory_order_relaxed);
      ready_.add(DeliveryReport{it->second.ticket,
                                DeliveryOutcome::unknown,
                                "no PubAck and no error from the NATS client in time",
                                -1,
                                -1,
                                {}});
      it = pending_.erase(it);
    }
  }

  void report(std::uint64_t ticket, DeliveryOutcome outcome, std::string error) {
    const std::lock_guard lock(mutex_);
    ready_.add(DeliveryReport{ticket, outcome, std::move(error), -1, -1, {}});
  }

  static void on_reconnected(natsConnection* /*connection*/, void* closure) {
    auto* self = static_cast<NatsSink*>(closure);
    self->counters_.nats_reconnects.fetch_add(1, std::memory_order_relaxed);
    ++self->connects_;  // the server may be another one now: the stream is checked again
  }

  NatsSinkOptions options_;
  nats::ClosedSignal closed_;  // before the connection: it outlives the connection's callbacks
  nats::OptionsHandle settings_;
  nats::ConnectionHandle connection_;
  nats::ContextHandle js_;
  std::atomic<std::uint64_t> connects_{0};         // reconnects so far (on nats.c's thread)
  std::uint64_t checked_for_ = ~std::uint64_t{0};  // the connects_ the stream was checked for
  Clock::time_point next_stream_check_{};
  std::string last_stream_problem_;
  std::atomic<int> in_ack_handler_{0};
  mutable std::mutex mutex_;
  std::condition_variable woken_;
  std::unordered_map<std::string, Pending> pending_;  // by event id
  detail::ReadyReports ready_;                        // under mutex_
  struct Counters {
    OUTBOX_NATS_SINK_STATS(OUTBOX_ATOMIC_STAT_FIELD)
  } counters_;
};

}  // namespace

std::unique_ptr<Sink> make_nats_sink(const NatsSinkOptions& options) {
  return std::make_unique<NatsSink>(options);
}

std::string render_nats_subject(const NatsSinkOptions& options, const Event& event) {
  return detail::render_key(options.subject_template, event, options.partitions);
}

}  // namespace outbox
