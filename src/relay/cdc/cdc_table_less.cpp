// CdcSource and table-less events: the slot's registration, a message's intake (checked, parsed
// by table_less_message.hpp, proven by the witness), and the writing of those the book leaves to
// the table.
#include <fmt/format.h>

#include <thread>

#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "outbox/producer.hpp"
#include "pg/params.hpp"
#include "relay/cdc/cdc_source.hpp"
#include "relay/cdc/table_less_message.hpp"

namespace outbox::detail {

namespace {

// The largest message a producer's statement writes: its events' text is at most
// kMaxEnqueueStatementBytes, and each byte of a payload may take six in a JSON string (\u001f).
constexpr std::size_t kMaxTableLessMessageBytes = 6 * kMaxEnqueueStatementBytes + 1024 * 1024;
// How long table-less events' transactions may take to become visible before they are written.
constexpr std::chrono::seconds kVisibleWithin{30};

}  // namespace

// A table-less relay registers its slot (producers write table-less events only while a
// registered slot exists); any other refuses a registered one: it would skip those events, or
// let the slot go over its budget.
void CdcSource::check_table_less_registration() {
  PGconn* conn = table_.connection();
  const std::string& slot = publications_.slot();
  if (options_.cdc.table_less) {
    registered_before_ = cdc_sql::register_slot(conn, options_.schema, slot, options_.relay_id);
    return;
  }
  const std::optional<std::string> by = cdc_sql::registered_by(conn, options_.schema, slot);
  if (!by) return;
  const std::string table = options_.schema.table("outbox_table_less_slots");
  throw ConfigError(fmt::format(
      "relay --source cdc: slot {} is registered for table-less events (by relay {}, in {}): "
      "start this relay with --table-less (cdc.table_less), or use another slot. If no "
      "producer writes table-less events any more and the slot holds none: DELETE FROM {} "
      "WHERE slot_name = '{}'",
      slot, printable(*by), table, table, slot));
}

void CdcSource::check_still_unregistered() {
  if (registration_checked_xid_ == session_.reading_xid) return;
  registration_checked_xid_ = session_.reading_xid;
  const std::optional<std::string> by =
      cdc_sql::registered_by(table_.connection(), options_.schema, publications_.slot());
  if (!by) return;
  session_.hold_position = true;  // the slot keeps the message for the table-less relay
  throw ConfigError(fmt::format(
      "relay --source cdc: slot {} was registered for table-less events (by relay {}) while this "
      "relay, started without --table-less, streamed it, and table-less events arrive: stopping "
      "without confirming them, so the table-less relay takes the slot and publishes them",
      publications_.slot(), printable(*by)));
}

// Before it is parsed: any role may emit a message of up to 1 GB, and parsing one takes many
// times that.
std::string CdcSource::refuse_unparsed(const cdc::LogicalMessage& message) const {
  if (!message.transactional() || !session_.book.in_transaction()) {
    return "it is not transactional";
  }
  // A transaction that moved no counter carries no producer's message.
  if (publications_.unproven_until() == 0 && session_.witness.empty()) {
    return "nothing proves a producer wrote it: its transaction moved no counter "
           "of outbox_aggregate_sequences (which only producers may write, where "
           "any role may emit a message: forged, or written by hand)";
  }
  if (message.content.size() > kMaxTableLessMessageBytes) {
    return fmt::format("it is {} bytes long; a producer writes at most {}", message.content.size(),
                       kMaxTableLessMessageBytes);
  }
  return {};
}

// One producer statement's events (ProducerOptions::table_less): read like inserted rows, or,
// in a transaction too large to hold, written to the table at once.
void CdcSource::take_table_less(const cdc::LogicalMessage& message) {
  if (const std::string why = refuse_unparsed(message); !why.empty()) {
    reject_message(message, why);
    return;
  }
  auto parsed = parse_table_less_message(message.content, session_.reading_xid);
  if (const auto* why = std::get_if<std::string>(&parsed)) {
    reject_message(message, *why);
    return;
  }
  TableLessMessage& read = std::get<TableLessMessage>(parsed);
  const Event& last = read.events.back();
  if (publications_.unproven_until() == 0 &&
      !session_.witness.vouch(last.aggregate_type, last.aggregate_id, last.aggregate_sequence)) {
    reject_message(
        message,
        fmt::format("nothing proves a producer wrote it: its transaction did not move the counter "
                    "of aggregate {} {} to {} before it (outbox_aggregate_sequences, which only "
                    "producers may write, where any role may emit a message: forged, or written "
                    "by hand)",
                    printable(last.aggregate_type), printable(last.aggregate_id),
                    last.aggregate_sequence));
    return;
  }
  admit_table_less(read.events, read.xid);
}

void CdcSource::admit_table_less(std::vector<Event>& events, const std::string& xid) {
  cdc::StreamBook& book = session_.book;
  std::vector<EventId> to_write;
  for (Event& event : events) {
    const EventId id = event.event_id;
    const std::uint64_t bytes = event.payload.size() + event.headers.size();
    if (book.contains(id) ||
        !session_.table_less
             .try_emplace(id, TableLessEvent{event, xid, session_.reading_commit_time})
             .second) {
      // The same id twice (a caller that supplies ids and retried, or reused one): nothing keeps
      // a table-less producer from it, and the book counts an event by its id. The same id is the
      // same event to every consumer; the first is published, this one is not.
      log().warn(
          "relay {}: table-less event {} ({} {} #{}) has the id of an event not yet "
          "published; it is not published again",
          options_.relay_id, id.to_string(), printable(event.aggregate_type),
          printable(event.aggregate_id), event.aggregate_sequence);
      continue;
    }
    if (!book.spilled() && book.reading_bytes() + bytes > options_.max_in_flight_bytes) {
      log().info(
          "relay {}: a transaction with more than {} bytes of events is left to the "
          "relay's own claim (its table-less events are written to the table)",
          options_.relay_id, options_.max_in_flight_bytes);
      book.spill();
    }
    if (book.spilled()) {
      to_write.push_back(id);
    } else {
      book.add(std::move(event), bytes);
    }
  }
  if (!book.spilled()) return;
  std::vector<EventId> left = book.take_left();
  left.insert(left.end(), to_write.begin(), to_write.end());
  // Untouched rows: the table path takes them only past the stream's horizon, so an earlier
  // event of their aggregate that the book still holds (it has no row) goes first.
  materialize(left, false);
}

void CdcSource::reject_message(const cdc::LogicalMessage& message, const std::string& why) {
  RelayCounters::add(counters_.messages_rejected, 1);
  log().error(
      "relay {}: a logical decoding message with prefix {} at {} (transaction {}) is not "
      "published: {}. Counted in outbox_relay_cdc_messages_rejected_total; the relay goes "
      "on",
      options_.relay_id, message_prefix_, cdc::format_lsn(message.lsn), session_.reading_xid,
      printable(why));
}

// An event must not be announced, from the table either, before its transaction is visible to
// other sessions.
void CdcSource::wait_visible(pg::ArrayLiteral& xids) {
  const auto deadline = Clock::now() + kVisibleWithin;
  pg::Params params;
  params.array(xids);
  while (pg::exec(table_.connection(), cdc_sql::invisible_transactions(), params.pointers())
             .int64(0, 0) > 0) {
    if (Clock::now() > deadline) {
      throw DatabaseError(
          "relay --source cdc: table-less events' transactions still not "
          "visible after 30 s (a synchronous standby that does not answer?)",
          "", true);
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
}

// Writes the table-less events among `ids` to the table, once their transactions are visible.
void CdcSource::materialize(const std::vector<EventId>& ids, bool touched) {
  std::vector<std::pair<EventId, const TableLessEvent*>> rows;
  for (const EventId& id : ids) {
    const auto found = session_.table_less.find(id);
    if (found != session_.table_less.end()) rows.emplace_back(id, &found->second);
  }
  if (rows.empty()) return;
  try {
    pg::ArrayLiteral xids, event_ids, types, aggregates, sequences, event_types, versions, payloads,
        headers, occurred;
    for (const auto& [id, row] : rows) {
      const Event& event = row->event;
      xids.add_plain(row->xid);
      event_ids.add(id);
      types.add(event.aggregate_type);
      aggregates.add(event.aggregate_id);
      sequences.add_plain(std::to_string(event.aggregate_sequence));
      event_types.add(event.event_type);
      versions.add_plain(std::to_string(event.schema_version));
      payloads.add(event.payload);
      headers.add(event.headers);
      // Untouched (spilled), it waits for the table path's horizon, which the stream's oldest
      // open transaction holds back; the producer's now() is its transaction's start, which may
      // be long before an earlier event of its aggregate committed (that one has no row, and is
      // perhaps still out): its commit time is after that one's, so it waits behind it.
      occurred.add(touched ? event.occurred_at : cdc::format_pg_timestamp(row->commit_time));
    }
    wait_visible(xids);
    const auto written =
        pg::exec(table_.connection(), cdc_sql::materialize_table_less(options_.schema),
                 pg::Params()
                     .array(event_ids)
                     .array(types)
                     .array(aggregates)
                     .array(sequences)
                     .array(event_types)
                     .array(versions)
                     .array(payloads)
                     .array(headers)
                     .array(occurred)
                     .boolean(touched)
                     .pointers());
    if (written.rows() != static_cast<int>(rows.size())) report_clashes(event_ids);
  } catch (...) {
    // The book is done with these events: the slot's position must not move past them before a
    // restarted stream brings them again.
    session_.hold_position = true;
    throw;
  }
  for (const auto& [id, row] : rows) session_.table_less.erase(id);
  RelayCounters::add(counters_.materialized, rows.size());
  log().debug("relay {}: wrote {} table-less event(s) to the table", options_.relay_id,
              rows.size());
}

// Not written: its id is there already (written before a restart: fine), or another pending
// event of its aggregate holds its sequence (rows written by hand?): say so.
void CdcSource::report_clashes(pg::ArrayLiteral& event_ids) {
  const auto clash = pg::exec(table_.connection(), cdc_sql::materialize_clashes(options_.schema),
                              pg::Params().array(event_ids).pointers());
  for (int row = 0; row < clash.rows(); ++row) {
    log().error(
        "relay {}: table-less event {} was not written to the table: another pending "
        "event of its aggregate holds its sequence; it is not published",
        options_.relay_id, clash.text(row, 0));
  }
}

}  // namespace outbox::detail
