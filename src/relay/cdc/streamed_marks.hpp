#pragma once
// The marks of streamed events, off the relay loop's critical path (docs/PERFORMANCE.md, "Change
// data capture as the fast path"). A batch of published outcomes is sent on a connection of its
// own and the loop goes on (reading the stream, checking, sending) while the server writes it;
// its answer is taken at a later turn. Two batches may be out at once, each on its own connection
// (a lane): outcomes that come while one is out go at once on the other, and a batch queued while
// both were free is split between them, so the server writes them side by side. An aggregate's
// next event waits for its predecessor's mark, so in a catch-up the time a mark takes is time the
// aggregate waits: with one lane the relay's thread waited for marks a third of a row catch-up.
// Outcomes that come while both are out are queued and go together as the next batch.
//
// The guarantees stay where they were: an outcome counts as written only once the answer that
// wrote it came (then the book hears of it, and the confirmed position may move past its
// transaction); a row the mark did not match comes back as unwritten, as from a synchronous mark.
// Two lanes never hold the same outcome, and the marks of different events commute. A broken
// connection or a refused statement loses nothing: every outcome of its lane not yet answered is
// queued again for the next send, on a new connection. The mark (cdc_sql::mark_streamed) matches
// only rows no relay claimed: writing it twice changes nothing.
//
// Not thread safe: the relay's thread owns it.

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "outbox/relay.hpp"
#include "pg/connection.hpp"
#include "relay/relay_counters.hpp"
#include "relay/send_window.hpp"

namespace outbox::detail {

class StreamedMarks {
 public:
  static constexpr std::size_t kLanes = 2;

  StreamedMarks(const RelayOptions& options, RelayCounters& counters);

  // Takes `outcomes` (published, unclaimed rows; emptied); sent at once when a lane is free.
  // Throws DatabaseError when the send fails: they are kept.
  void add(std::vector<Outcome>& outcomes);
  // Takes the answers that have come, then sends what was queued meanwhile. With `wait` (a
  // duration; none: no limit), while a batch is out and no answer has come: waits for the first
  // answer, for `wake_fd` (>= 0: the change stream's socket) to turn readable, or for `wait` to
  // pass, whichever comes first. The ids the answers wrote go to `written`; outcomes whose rows
  // they did not match to `unwritten`. Throws DatabaseError (a connection broke, or the server
  // refused the statement): nothing is lost, the next call sends again on a new connection.
  void collect(std::optional<std::chrono::milliseconds> wait, std::vector<EventId>& written,
               std::vector<Outcome>& unwritten, int wake_fd = -1);
  // A batch out or queued: outcomes not written yet.
  [[nodiscard]] bool pending() const;
  [[nodiscard]] bool out() const;
  // The sockets on which the answers of the batches out come; -1 for a lane with none out.
  [[nodiscard]] std::array<int, kLanes> answer_sockets() const;

 private:
  struct Lane {
    std::optional<pg::Connection> connection;
    std::vector<Outcome> out;  // sent, answer not taken
  };

  void send_queued();
  // Sends `batch` on `lane`, which then holds it; throws with `batch` left as it was.
  void send(Lane& lane, std::vector<Outcome>& batch);
  // Whether the answer of the batch out on `lane` has come; never blocks.
  bool arrived(Lane& lane);
  // Waits until an answer or `wake_fd` may be readable, at most `timeout_ms` (-1: no limit); true
  // when the wait is over for the caller: `wake_fd` readable, or the time up.
  bool wait_for_answer(int wake_fd, int timeout_ms);
  void take(Lane& lane, std::vector<EventId>& written, std::vector<Outcome>& unwritten);
  // After an error: the lane's connection goes (its next send opens one); what was out on it is
  // queued again.
  void drop_connection(Lane& lane);

  const RelayOptions& options_;
  RelayCounters& counters_;
  const std::string sql_;
  std::array<Lane, kLanes> lanes_;
  std::vector<Outcome> queued_;  // to send with the next batch
};

}  // namespace outbox::detail
