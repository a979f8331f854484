#include "outbox/relay.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <functional>

#include "common/backoff.hpp"
#include "common/fault.hpp"
#include "common/health_board.hpp"
#include "common/log.hpp"
#include "relay/cdc/cdc_source.hpp"
#include "relay/claim_schedule.hpp"
#include "relay/polling_source.hpp"
#include "relay/relay_counters.hpp"
#include "relay/relay_options.hpp"
#include "relay/send_window.hpp"
#include "relay/sender.hpp"

namespace outbox {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using detail::kAwakePoll;
using detail::kFirstIdleWait;
using detail::kStallAfter;
using detail::kStalledPoll;
using detail::kStayAwake;

// The loop: fetch from the source into the send window and the sink, take the sink's reports,
// record their outcomes, and between those wait as the mode says. Modes:
//   awake          work in flight or found moments ago: looks by itself every kAwakePoll
//                  (producers do not notify an awake relay);
//   staying awake  nothing in flight and nothing found for up to kStayAwake: still looks by
//                  itself, since under steady traffic more comes soon;
//   listening      idle: producers notify it; sleeps until a NOTIFY, a duty or its idle timer;
//   reconnecting   PostgreSQL is gone: keeps taking reports, reconnects with backoff;
//   draining       stopping: takes reports until drain_timeout, records them, fetches nothing.
// For a destination that cannot recognise a repeat, a claim is the only proof that an event may
// have been sent: it must survive a PostgreSQL crash or a failover, so claims and marks commit
// synchronously (as with durable_marks), whatever the options say.
RelayOptions durable_if_repeats_are_duplicates(RelayOptions options, const Sink* sink) {
  if (sink != nullptr && sink->repeats_are_duplicates()) options.durable_marks = true;
  return options;
}

class Relay::Impl {
 public:
  Impl(RelayOptions options, std::unique_ptr<Sink> sink)
      : options_(detail::checked(durable_if_repeats_are_duplicates(std::move(options), sink.get()),
                                 kFirstIdleWait)),
        window_(options_.max_in_flight, options_.max_in_flight_bytes),
        health_("relay " + options_.relay_id),
        sender_(options_.relay_id, std::move(sink), window_, counters_, health_) {
    // PostgreSQL not up yet (a service starting beside its database) is not an error: run() keeps
    // trying. What no retry can fix (a wrong password, a schema too old) is thrown here.
    try {
      connect_source();
    } catch (const DatabaseError& error) {
      if (!error.retryable()) throw;
      health_.set(Health::database_unavailable, error.what());
    }
  }

  bool loop(bool until_idle, Clock::time_point deadline) {
    draining_ = false;
    if (owner_ == nullptr && !first_connection(until_idle, deadline)) {
      health_.set(Health::stopped);
      return false;
    }
    Pass pass;
    health_.set(Health::running);
    while (!stop_.load(std::memory_order_relaxed)) {
      if (until_idle && Clock::now() >= deadline) break;
      try {
        if (step(pass, until_idle)) return true;
      } catch (const DatabaseError& error) {
        if (!error.retryable()) {
          health_.set(Health::stopped, error.what());
          throw;
        }
        reconnect(error);
        pass.claim_wanted = true;
        pass.schedule.announced();
        pass.last_report = Clock::now();    // reports taken during the outage are written by now
        pass.registered = false;            // say again that we are awake, on the new connection
      } catch (const ConfigError& error) {  // what the stream met and an operator must fix
        health_.set(Health::stopped, error.what());
        throw;
      }
    }
    drain();
    source_->leave();
    health_.set(Health::stopped);
    return false;
  }

  void request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }

  RelayStats stats() const {
    RelayStats s;
    counters_.snapshot(s);
    std::tie(s.health, s.last_error) = health_.snapshot();
    s.last_error_age = health_.last_error_age();
    s.sink = sender_.sink_stats();
    return s;
  }

  RelayMetrics metrics() const {
    RelayMetrics m;
    m.stats = stats();
    m.by_aggregate_type = counters_.by_type.snapshot();
    m.commit_to_ack = counters_.commit_to_ack.snapshot();
    m.send_to_ack = counters_.send_to_ack.snapshot();
    m.claim_batch = counters_.claim_batch.snapshot();
    return m;
  }

  const std::string& relay_id() const noexcept { return options_.relay_id; }

 private:
  // The loop's state between its steps.
  struct Pass {
    bool claim_wanted = true;
    bool registered = false;
    detail::ClaimSchedule schedule{Clock::now()};
    milliseconds idle_wait = kFirstIdleWait;
    // Since when the broker owes us nothing: the last report, or the send that ended a time
    // with nothing in flight.
    Clock::time_point last_report = Clock::now();
    Clock::time_point last_work = Clock::now();  // the last fetch that found rows, or report
    std::vector<DeliveryReport> reports;         // reused by every step: no allocation per poll
  };

  void connect_source() {
    std::unique_ptr<detail::RelaySourceBase> source;
    if (options_.source == RelaySource::cdc && sender_.repeats_are_duplicates()) {
      throw ConfigError(
          "relay: this sink's destination cannot recognise a repeat (--http-on-unknown "
          "reconcile), and a streamed event has no claim to tell whether a stopped relay sent "
          "it: use --source polling with it");
    }
    if (options_.source == RelaySource::cdc) {
      source = std::make_unique<detail::CdcSource>(options_, counters_, &health_);
    } else {
      source = std::make_unique<detail::PollingSource>(options_, counters_, "", &health_);
    }
    source_ = source.get();
    recorder_ = source.get();
    owner_ = std::move(source);
  }

  // Until PostgreSQL takes the first connection, tries again with backoff; false when stopped or
  // past the deadline of run_until_idle first.
  bool first_connection(bool until_idle, Clock::time_point deadline) {
    return retry([this] { connect_source(); },
                 [&] {
                   return stop_.load(std::memory_order_relaxed) ||
                          (until_idle && Clock::now() >= deadline);
                 });
  }

  // Tries `attempt` until it works, with backoff between tries, calling `between` in slices while
  // it waits; false when `stopping` said so first. A DatabaseError no retry can fix stops the
  // relay and is thrown; a retryable one shows as database_unavailable until an attempt works.
  bool retry(const std::function<void()>& attempt, const std::function<bool()>& stopping,
             const std::function<void(milliseconds)>& between = {}) {
    detail::Backoff backoff(options_.reconnect_backoff_base, options_.reconnect_backoff_max);
    while (backoff.wait(stopping, between, milliseconds(50))) {
      try {
        attempt();
        return true;
      } catch (const DatabaseError& error) {
        if (!error.retryable()) {
          health_.set(Health::stopped, error.what());
          throw;
        }
        health_.set(Health::database_unavailable, error.what());
      }
    }
    return false;
  }

  // One turn of the loop; true when run_until_idle is done.
  bool step(Pass& pass, bool until_idle) {
    if (!pass.registered) {
      source_->set_listening(false);  // awake: producers need not notify while we look ourselves
      pass.registered = true;
    }
    // Notifications that arrived meanwhile ask for a fetch; reading them never blocks here.
    if (source_->wait_for_news(milliseconds(0))) {
      pass.claim_wanted = true;
      announced(pass);
    }
    const bool stalled = !window_.empty() && Clock::now() - pass.last_report > kStallAfter;
    if (pass.schedule.due(Clock::now(), stalled ? kStalledPoll : kAwakePoll)) {
      pass.claim_wanted = true;
    }
    if (source_->run_duties(Clock::now(), window_)) {
      pass.claim_wanted = true;
      pass.schedule.announced();  // like a NOTIFY: never paced
    }
    const bool paced = pass.claim_wanted && pass.schedule.paced(Clock::now());
    const std::size_t fetched = pass.claim_wanted && !paced ? fetch(pass) : 0;

    // With the window full (events or bytes) a wanted fetch waits for reports like anything
    // else, or the loop would poll without waiting until the broker answers.
    const bool can_fetch = window_.allows_a_fetch();
    const bool busy = fetched > 0 || (pass.claim_wanted && can_fetch && !paced);
    // Wait for reports until our own next look is due, at most 5 ms.
    const milliseconds look = paced     ? detail::ClaimSchedule::kGap
                              : stalled ? kStalledPoll
                                        : kAwakePoll;
    const milliseconds wait = !can_fetch ? milliseconds(5)
                              : busy     ? milliseconds(0)
                                         : std::clamp(pass.schedule.until(Clock::now(), look),
                                                      milliseconds(0), milliseconds(5));
    await_reports(pass, wait, can_fetch && !paced, paced);
    const std::vector<DeliveryReport>& reports = pass.reports;
    // Outcomes also come without a report: an event parked in doubt as it was fetched
    // (Sender::park_in_doubt). They are written now, before their claim's lease runs out and
    // another relay takes the event over (the reconcile campaign once saw one go round so).
    if (!reports.empty() || window_.unrecorded() > 0) {
      if (!reports.empty()) pass.last_report = Clock::now();
      record();
      // A published event may unblock the next of its aggregate; a failed one frees room.
      pass.claim_wanted = true;
    }
    if (window_.empty() && !pass.claim_wanted) return idle(pass, until_idle);
    if (fetched > 0 || !reports.empty()) {
      pass.last_work = Clock::now();
      pass.idle_wait = kFirstIdleWait;
      if (source_->listening()) source_->set_listening(false);  // busy again: no NOTIFY needed
    }
    return false;
  }

  // News from the source asks for a fetch at once, unless the source says it may wait for the
  // paced one (EventSource::news_may_wait: a change stream's few new transactions under heavy live
  // traffic, where a check statement per transaction or two cost the relay's session most of its
  // CPU at live max: docs/PERFORMANCE.md).
  void announced(Pass& pass) {
    if (!source_->news_may_wait()) pass.schedule.announced();
  }

  // Waits up to `wait` for reports (pass.reports: what came). With room to send (`news_counts`),
  // what the source brings meanwhile (a change stream) is news as much as a report is: the wait
  // ends at whichever comes first, and a fetch is wanted.
  void await_reports(Pass& pass, milliseconds wait, bool news_counts, bool paced) {
    if (window_.empty()) {
      pass.reports.clear();
      if (paced && source_->wait_for_news(wait)) announced(pass);
      return;
    }
    const bool waited =
        wait > milliseconds(0) && news_counts && wait_for_reports_or_news(wait, pass.claim_wanted);
    sender_.poll(waited ? milliseconds(0) : wait, pass.reports);
  }

  // Waits up to `wait` until the sink may have reports or one of the source's news sockets is
  // readable (then sets `news`); false, having waited for nothing, when the sink or the source has
  // nothing to wait on this way. Without it the loop waited in the sink's poll() alone, and a
  // change stream's next transaction waited for the broker's next answer: a table-less catch-up
  // went from ~85,000 to ~100,000 events/s when that wait ended at once (docs/PERFORMANCE.md).
  bool wait_for_reports_or_news(milliseconds wait, bool& news) {
    const int sink = sender_.wake_fd();
    if (sink < 0) return false;
    std::array<pollfd, detail::NewsSockets().size() + 1> fds{};
    nfds_t count = 0;
    for (const int socket : source_->news_sockets()) {
      if (socket >= 0) fds[count++] = pollfd{socket, POLLIN, 0};
    }
    if (count == 0) return false;
    const nfds_t sockets = count;
    fds[count++] = pollfd{sink, POLLIN, 0};
    if (::poll(fds.data(), count, static_cast<int>(wait.count())) > 0) {
      for (nfds_t i = 0; i < sockets; ++i) news = news || fds[i].revents != 0;
    }
    return true;  // < 0 (EINTR): the caller looks again at once
  }

  // Fetches while there is room, wrapping around once to the aggregates before the cursor;
  // returns how many events it sent.
  std::size_t fetch(Pass& pass) {
    const std::size_t room = window_.room();
    if (room == 0 || !window_.allows_a_fetch()) return 0;
    const std::size_t limit = std::min(room, options_.batch_size);
    const auto now = Clock::now();
    pass.schedule.started(now);
    if (window_.empty()) pass.last_report = now;
    detail::Fetched result = fetch_and_send(limit);
    std::size_t fetched = result.events.size();
    if (result.reached_end && result.began_mid_way && fetched < limit && window_.allows_a_fetch()) {
      // Wrap around: the aggregates before the cursor get their turn in this same pass.
      const detail::Fetched wrapped = fetch_and_send(limit - fetched);
      fetched += wrapped.events.size();
      result.reached_end = wrapped.reached_end;
    }
    // More after the cursor, or a full batch: fetch again at once. Otherwise wait for a reason
    // (NOTIFY, a report, the idle timer).
    pass.claim_wanted = !result.reached_end || fetched == limit;
    pass.schedule.finished(fetched, pass.claim_wanted);
    return fetched;
  }

  detail::Fetched fetch_and_send(std::size_t limit) {
    detail::Fetched result = source_->fetch(limit, window_.byte_room(), window_.empty());
    window_.set_waiting(result.waiting_bytes);
    sender_.send(result.events);
    return result;
  }

  // Nothing in flight and no fetch wanted: stay awake a little, then listen and sleep.
  bool idle(Pass& pass, bool until_idle) {
    if (until_idle) {
      source_->leave();
      return true;
    }
    if (!source_->listening() && Clock::now() - pass.last_work < kStayAwake) {
      // Work came moments ago: more is likely, and an awake relay finds it within kAwakePoll
      // without making producers notify. Wait for our next look; at least 1 ms, so a fetch that
      // itself took kAwakePoll does not make the next one follow at once for the whole kStayAwake.
      if (source_->wait_for_news(std::clamp(pass.schedule.until(Clock::now(), kAwakePoll),
                                            milliseconds(1), kAwakePoll))) {
        announced(pass);
      }
      pass.claim_wanted = true;
      return false;
    }
    if (!source_->listening()) {
      // From now on producers notify us. A row committed after our last fetch but before this
      // statement announced nothing: look once more before sleeping.
      source_->set_listening(true);
      pass.idle_wait = kFirstIdleWait;
      pass.claim_wanted = true;
      return false;
    }
    // Sleep until NOTIFY or the adaptive poll interval (rows whose backoff or foreign lease ends
    // announce nothing), never past the source's next duty.
    const auto duty_due = std::chrono::duration_cast<milliseconds>(source_->next_duty() -
                                                                   Clock::now() + milliseconds(1));
    if (source_->wait_for_news(std::clamp(duty_due, milliseconds(0), pass.idle_wait))) {
      pass.idle_wait = kFirstIdleWait;
      pass.schedule.announced();
    } else {
      pass.idle_wait = std::min(pass.idle_wait * 2, options_.idle_poll_max);
    }
    pass.claim_wanted = true;
    return false;
  }

  // Writes the outcomes taken so far, and sends the successors the marks claimed. What a failed
  // write left in the window is written by the next call.
  void record() {
    std::vector<detail::SourcedEvent> successors =
        recorder_->record_published(window_.published(), !draining_, window_.room_beyond_waiting());
    sender_.send(successors);
    recorder_->record_failed(window_.failed());
  }

  // After a retryable DatabaseError: keeps taking broker reports (their outcomes wait in the
  // window), reconnects when the connection is gone, writes what waited, renews the leases of
  // what is still in flight. Returns when all that worked or a stop was requested.
  void reconnect(const DatabaseError& first) {
    health_.set(Health::database_unavailable, first.what());
    std::vector<DeliveryReport> reports;
    const auto take_reports = [&](milliseconds slice) { sender_.poll(slice, reports, true); };
    const auto reconnected = [&] {
      source_->reconnect(window_);
      record();
      counters_.reconnects.fetch_add(1, std::memory_order_relaxed);
      health_.set(Health::running);
    };
    retry(
        reconnected, [this] { return stop_.load(std::memory_order_relaxed); }, take_reports);
  }

  void drain() {
    draining_ = true;
    sender_.drain(Clock::now() + options_.drain_timeout);
    try {
      record();
    } catch (const DatabaseError& error) {
      detail::log().warn(
          "relay {}: stopped with {} outcome(s) unwritten ({}); their rows are retaken after the "
          "lease",
          relay_id(), window_.unrecorded(), error.what());
    }
    if (!window_.empty()) {
      detail::log().warn(
          "relay {}: stopped with {} send(s) unreported; their rows are retaken after the lease",
          relay_id(), window_.size());
    }
  }

  RelayOptions options_;
  detail::SendWindow window_;
  detail::RelayCounters counters_;
  detail::HealthBoard health_;
  detail::Sender sender_;                           // the sink, driven into and out of the window
  std::unique_ptr<detail::RelaySourceBase> owner_;  // the source and the recorder
  detail::EventSource* source_ = nullptr;
  detail::CompletionRecorder* recorder_ = nullptr;
  bool draining_ = false;  // stopping: record outcomes, fetch nothing new
  std::atomic<bool> stop_{false};
};

Relay::Relay(RelayOptions options, std::unique_ptr<Sink> sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}
Relay::~Relay() = default;

void Relay::run() {
  detail::log().info("relay {} started", impl_->relay_id());
  impl_->loop(false, Clock::time_point::max());
  detail::log().info("relay {} stopped", impl_->relay_id());
}

bool Relay::run_until_idle(milliseconds limit) { return impl_->loop(true, Clock::now() + limit); }

void Relay::request_stop() noexcept { impl_->request_stop(); }
RelayStats Relay::stats() const { return impl_->stats(); }
RelayMetrics Relay::metrics() const { return impl_->metrics(); }
const std::string& Relay::relay_id() const noexcept { return impl_->relay_id(); }

}  // namespace outbox
