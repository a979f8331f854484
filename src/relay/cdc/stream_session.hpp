#pragma once
// Everything that belongs to one replication stream of the change-data-capture relay: built whole
// when a stream starts and dropped whole when it ends (CdcSource::reset_session, the one place
// that does either). A relay that does not stream (standby, released, or between a failed start
// and its reconnect) holds an empty session: no stream, an empty book, no table-less events.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "cdc/pgoutput.hpp"
#include "cdc/replication_stream.hpp"
#include "outbox/event.hpp"
#include "relay/cdc/outbox_rows.hpp"
#include "relay/cdc/sequence_witness.hpp"
#include "relay/cdc/stream_book.hpp"
#include "relay/cdc/table_sweep.hpp"

namespace outbox::detail {

// A table-less event read and not done, with its transaction's id and commit time.
struct TableLessEvent {
  Event event;
  std::string xid;
  cdc::PgTimestamp commit_time = 0;
};

struct StreamSession {
  std::unique_ptr<cdc::ReplicationStream> stream;  // null: not streaming
  cdc::StreamBook book;
  std::unordered_map<EventId, TableLessEvent, cdc::StreamBook::IdHash> table_less;
  std::optional<cdc::OutboxColumns> columns;  // the outbox table's, from its Relation message
  cdc::SequenceWitness witness;
  // When the table path may sweep beside this stream (TableSweep): a new stream sweeps at once.
  TableSweep sweep;
  // Reading stopped at Publications::unproven_until: restart once everything is confirmed.
  bool witness_due = false;
  bool hold_position = false;  // a table-less write failed: report no position until restart
  bool deferred = false;       // the last look found rows not visible yet
  cdc::Lsn confirmed_sent = 0;
  // The stream had received all WAL flushed at this server time (a probe while nothing was
  // open): with nothing open, the horizon follows it rather than the last commit read.
  cdc::PgTimestamp caught_up_time = 0;
  std::optional<std::pair<cdc::PgTimestamp, cdc::Lsn>> probe;  // (server time, flush lsn)
  // Whether the outbox table may hold a row with a table-less event's id: it held rows when this
  // stream took the slot (or that could not be asked), or the stream has brought an insert since
  // (CdcSource::asked_about).
  bool table_rows = true;
  std::uint32_t reading_xid = 0;             // Begin's xid of the transaction being read
  cdc::PgTimestamp reading_commit_time = 0;  // and its commit time
  // The last transaction begun was sent within kLiveLag of its commit (both by the server's
  // clock): the stream keeps up with live traffic rather than catching up
  // (CdcSource::news_may_wait).
  static constexpr cdc::PgTimestamp kLiveLag = 100'000;  // µs
  bool live = false;

  explicit StreamSession(std::chrono::milliseconds table_poll)
      : sweep(TableSweep::kMostPolls * table_poll) {}

  [[nodiscard]] bool streaming() const { return stream && stream->streaming(); }
};

}  // namespace outbox::detail
