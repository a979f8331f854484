#pragma once
// Everything that belongs to one replication stream of the change-data-capture relay: built whole
// when a stream starts and dropped whole when it ends (CdcSource::reset_session, the one place
// that does either). A relay that does not stream (standby, released, or between a failed start
// and its reconnect) holds an empty session: no stream, an empty book, no table-less events.

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

namespace outbox::detail {

// A table-less event read and not done, with its transaction's id and commit time.
struct TableLessEvent {
  Event event;
  std::string xid;
  cdc::PgTimestamp commit_time = 0;
  // A row with its id was inserted (a caller that gave a row the same id): the check must look.
  bool row_seen = false;
};

struct StreamSession {
  std::unique_ptr<cdc::ReplicationStream> stream;  // null: not streaming
  cdc::StreamBook book;
  std::unordered_map<EventId, TableLessEvent, cdc::StreamBook::IdHash> table_less;
  std::optional<cdc::OutboxColumns> columns;  // the outbox table's, from its Relation message
  cdc::SequenceWitness witness;
  // Reading stopped at Publications::unproven_until: restart once everything is confirmed.
  bool witness_due = false;
  bool hold_position = false;  // a table-less write failed: report no position until restart
  bool deferred = false;       // the last look found rows not visible yet
  cdc::Lsn confirmed_sent = 0;
  // The stream had received all WAL flushed at this server time (a probe while nothing was
  // open): with nothing open, the horizon follows it rather than the last commit read.
  cdc::PgTimestamp caught_up_time = 0;
  std::optional<std::pair<cdc::PgTimestamp, cdc::Lsn>> probe;  // (server time, flush lsn)
  // Read just after this stream started, when the slot's earlier readers were gone: the server's
  // flushed WAL (0: unknown), past which no earlier stream decoded a transaction (so no earlier
  // relay wrote its table-less events to the table), and whether any row was unpublished (pending
  // or skipped) then (CdcSource::asked_about).
  cdc::Lsn fresh_after = 0;
  bool rows_unpublished_at_start = true;
  std::uint32_t reading_xid = 0;             // Begin's xid of the transaction being read
  cdc::PgTimestamp reading_commit_time = 0;  // and its commit time

  [[nodiscard]] bool streaming() const { return stream && stream->streaming(); }
};

}  // namespace outbox::detail
