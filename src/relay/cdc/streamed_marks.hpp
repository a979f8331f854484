#pragma once
// The marks of streamed events, off the relay loop's critical path (docs/PERFORMANCE.md, "Change
// data capture as the fast path"). A batch of published outcomes is sent on a connection of its
// own and the loop goes on (reading the stream, checking, sending) while the server writes it;
// its answer is taken at a later turn. While one batch is out, outcomes that come meanwhile are
// queued and go together as the next batch, one statement for all of them.
//
// The guarantees stay where they were: an outcome counts as written only once the answer that
// wrote it came (then the book hears of it, and the confirmed position may move past its
// transaction); a row the mark did not match comes back as unwritten, as from a synchronous mark.
// A broken connection or a refused statement loses nothing: every outcome not yet answered stays
// here for the next send, on a new connection. The mark is the polling relay's statement for
// unclaimed rows (relay_sql::mark_published): writing it twice changes nothing.
//
// Not thread safe: the relay's thread owns it.

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
  StreamedMarks(const RelayOptions& options, RelayCounters& counters);

  // Takes `outcomes` (published, unclaimed rows; emptied); sent at once when no batch is out.
  // Throws DatabaseError when the send fails: they are kept.
  void add(std::vector<Outcome>& outcomes);
  // Takes the answer of the batch out if it has come (with `wait`: waits for it), then sends what
  // was queued meanwhile. The ids the answer wrote go to `written`; outcomes whose rows it did not
  // match to `unwritten`. Throws DatabaseError (the connection broke, or the server refused the
  // statement): nothing is lost, the next call sends again on a new connection.
  void collect(bool wait, std::vector<EventId>& written, std::vector<Outcome>& unwritten);
  // A batch out or queued: outcomes not written yet.
  [[nodiscard]] bool pending() const { return !out_.empty() || !queued_.empty(); }
  [[nodiscard]] bool out() const { return !out_.empty(); }
  // The socket on which the answer of the batch out comes; -1 when none is out.
  [[nodiscard]] int answer_socket() const;

 private:
  void send_queued();
  // After an error: the connection goes (the next send opens one); what was out is queued again.
  void drop_connection();

  const RelayOptions& options_;
  RelayCounters& counters_;
  const std::string sql_;
  std::optional<pg::Connection> connection_;
  std::vector<Outcome> out_;     // sent, answer not taken
  std::vector<Outcome> queued_;  // to send with the next batch
};

}  // namespace outbox::detail
