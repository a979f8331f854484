#include "relay/cdc/streamed_marks.hpp"

#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_set>

#include "common/fault.hpp"
#include "pg/array_literal.hpp"
#include "relay/cdc/cdc_sql.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

namespace {

// A queued batch is split between two free lanes only when each half holds at least this many:
// below it a statement's own cost (a round trip, a commit) outweighs writing side by side.
constexpr std::size_t kLeastHalf = 256;

}  // namespace

StreamedMarks::StreamedMarks(const RelayOptions& options, RelayCounters& counters)
    : options_(options), counters_(counters), sql_(cdc_sql::mark_streamed(options.schema)) {}

bool StreamedMarks::pending() const { return out() || !queued_.empty(); }

bool StreamedMarks::out() const {
  return std::any_of(lanes_.begin(), lanes_.end(),
                     [](const Lane& lane) { return !lane.out.empty(); });
}

void StreamedMarks::add(std::vector<Outcome>& outcomes) {
  for (Outcome& outcome : outcomes) queued_.push_back(std::move(outcome));
  outcomes.clear();
  send_queued();
}

void StreamedMarks::send_queued() {
  if (queued_.empty()) return;
  std::array<Lane*, kLanes> free{};
  std::size_t frees = 0;
  for (Lane& lane : lanes_) {
    if (lane.out.empty()) free[frees++] = &lane;
  }
  if (frees == 0) return;
  OUTBOX_FAULT(fault::kRelayAfterAckBeforeMark);
  const std::size_t parts = std::clamp<std::size_t>(queued_.size() / kLeastHalf, 1, frees);
  std::vector<Outcome> batch = std::move(queued_);
  queued_.clear();
  const std::size_t size = batch.size();
  for (std::size_t part = 0; part < parts; ++part) {
    const auto begin = batch.begin() + static_cast<std::ptrdiff_t>(part * size / parts);
    const auto end = batch.begin() + static_cast<std::ptrdiff_t>((part + 1) * size / parts);
    std::vector<Outcome> piece;
    try {
      piece.assign(std::make_move_iterator(begin), std::make_move_iterator(end));
      send(*free[part], piece);
    } catch (...) {  // this piece and the ones after it were not sent: queued again
      queued_.insert(queued_.end(), std::make_move_iterator(piece.begin()),
                     std::make_move_iterator(piece.end()));
      queued_.insert(queued_.end(), std::make_move_iterator(piece.empty() ? begin : end),
                     std::make_move_iterator(batch.end()));
      throw;
    }
  }
}

void StreamedMarks::send(Lane& lane, std::vector<Outcome>& batch) {
  try {
    if (!lane.connection) {
      lane.connection.emplace(
          relay_sql::open_relay_session(options_.database_url, options_.durable_marks));
    }
    pg::ArrayLiteral ids;
    for (const Outcome& outcome : batch) ids.add(outcome.event_id);
    pg::send_prepared(lane.connection->get(), sql_, {ids.text().c_str()});
  } catch (const DatabaseError&) {
    drop_connection(lane);
    throw;
  }
  lane.out = std::move(batch);
  RelayCounters::add(counters_.mark_queries, 1);
}

void StreamedMarks::collect(std::optional<std::chrono::milliseconds> wait,
                            std::vector<EventId>& written, std::vector<Outcome>& unwritten,
                            int wake_fd) {
  const auto until = wait ? std::chrono::steady_clock::now() + *wait
                          : std::chrono::steady_clock::time_point::max();
  for (;;) {
    bool took = false;
    for (Lane& lane : lanes_) {
      if (lane.out.empty() || !arrived(lane)) continue;
      take(lane, written, unwritten);
      took = true;
    }
    if (took || !out()) break;
    int timeout_ms = -1;
    if (wait) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timeout_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 60'000));
    }
    if (wait_for_answer(wake_fd, timeout_ms)) break;
  }
  send_queued();
}

bool StreamedMarks::arrived(Lane& lane) {
  try {
    return pg::answer_arrived(lane.connection->get());
  } catch (const DatabaseError&) {
    drop_connection(lane);
    throw;
  }
}

bool StreamedMarks::wait_for_answer(int wake_fd, int timeout_ms) {
  std::array<pollfd, kLanes + 1> fds{};
  nfds_t count = 0;
  for (const int socket : answer_sockets()) {
    if (socket >= 0) fds[count++] = pollfd{socket, POLLIN, 0};
  }
  const nfds_t lanes = count;
  if (wake_fd >= 0) fds[count++] = pollfd{wake_fd, POLLIN, 0};
  // EINTR, or a socket readable with only part of an answer: the caller looks again.
  const int ready = ::poll(fds.data(), count, timeout_ms);
  if (ready == 0) return true;  // the time is up
  return ready > 0 && wake_fd >= 0 && fds[lanes].revents != 0;
}

void StreamedMarks::take(Lane& lane, std::vector<EventId>& written,
                         std::vector<Outcome>& unwritten) {
  std::vector<std::string> marked_ids;
  try {
    marked_ids = cdc_sql::read_mark_streamed(pg::take_answer(lane.connection->get(), sql_));
  } catch (const DatabaseError&) {
    drop_connection(lane);
    throw;
  }
  OUTBOX_FAULT(fault::kRelayAfterMark);
  const std::unordered_set<std::string> marked(marked_ids.begin(), marked_ids.end());
  for (Outcome& outcome : lane.out) {
    if (marked.contains(outcome.event_id.to_string())) {
      counters_.by_type.add(outcome.type, TypedCounts::published);
      written.push_back(outcome.event_id);
    } else {
      unwritten.push_back(std::move(outcome));
    }
  }
  RelayCounters::add(counters_.published, marked_ids.size());
  lane.out.clear();
}

std::array<int, StreamedMarks::kLanes> StreamedMarks::answer_sockets() const {
  std::array<int, kLanes> sockets{};
  for (std::size_t i = 0; i < kLanes; ++i) {
    const Lane& lane = lanes_[i];
    sockets[i] = lane.out.empty() || !lane.connection ? -1 : PQsocket(lane.connection->get());
  }
  return sockets;
}

void StreamedMarks::drop_connection(Lane& lane) {
  lane.connection.reset();
  for (Outcome& outcome : lane.out) queued_.push_back(std::move(outcome));
  lane.out.clear();
}

}  // namespace outbox::detail
