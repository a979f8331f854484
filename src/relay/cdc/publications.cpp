#include "relay/cdc/publications.hpp"

#include <fmt/format.h>

#include "cdc/slot_admin.hpp"
#include "common/log.hpp"
#include "common/printable.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"
#include "relay/cdc/cdc_sql.hpp"
#include "relay/relay_sql.hpp"

namespace outbox::detail {

Publications::Publications(const RelayOptions& options)
    : options_(options),
      slot_(shard_slot_name(options.cdc)),
      publication_(shard_publication_name(options.cdc, options.cdc.publication.empty()
                                                           ? options.schema.name() + "_outbox"
                                                           : options.cdc.publication)) {
  cdc::validate_slot_name(slot_);
  cdc::validate_publication_name(publication_);
  if (!options.cdc.table_less) return;
  witness_ = publication_ + "_seq";
  if (witness_.size() > 63) {
    throw ConfigError(fmt::format(
        "relay --source cdc --table-less: the publication name {} leaves no room for its "
        "companion {}_seq (PostgreSQL names have at most 63 bytes); give --publication "
        "a name of at most 59 bytes",
        printable(publication_), printable(publication_)));
  }
}

// CREATE PUBLICATION needs CREATE on the database and ownership of the table; a relay role
// without them gets the statement to run.
void Publications::ensure(PGconn* conn) {
  const std::string wal_level = cdc::wal_level(conn);
  if (wal_level != "logical") {
    throw ConfigError(fmt::format(
        "relay --source cdc: the server's wal_level is {}; set wal_level = logical (and "
        "restart PostgreSQL) or run the polling relay",
        wal_level));
  }
  const std::string table = options_.schema.table("outbox_events");
  table_oid_ = cdc::table_oid(conn, table);
  // A shard's publication has a row filter: its shard's aggregates only.
  const std::string filter =
      options_.cdc.shards <= 1
          ? std::string()
          : " WHERE (" + relay_sql::shard_condition("", options_.cdc.shards, options_.cdc.shard) +
                ")";
  ensure_publication(conn, publication_, table, "insert", filter);
  if (witness_.empty()) return;
  // Every statement of a table-less producer inserts or updates its aggregate's counter.
  const std::string counters = options_.schema.table("outbox_aggregate_sequences");
  ensure_publication(conn, witness_, counters, "insert, update", "");
  check_witness_shape(conn, counters);
}

// One made by hand may leave out what the proof needs: every message of an aggregate that had a
// counter already would be refused, and a table-less event has no other copy.
void Publications::check_witness_shape(PGconn* conn, const std::string& counters) {
  if (!cdc::publication_narrowed(conn, witness_, counters)) return;
  throw ConfigError(fmt::format(
      "relay --source cdc --table-less: publication {} must publish inserts and updates of "
      "every row and column of {} (it proves which messages are a producer's); it has a "
      "row filter, a column list or leaves inserts or updates out. Drop it and let the relay "
      "make it again: DROP PUBLICATION {}",
      printable(witness_), counters, pg::quote_identifier(conn, witness_)));
}

void Publications::ensure_publication(PGconn* conn, const std::string& name,
                                      const std::string& table, const std::string& publish,
                                      const std::string& filter) {
  const cdc::PublicationState state = cdc::publication_state(conn, name, table);
  if (state.has_table) return;
  // Missing, or there without this table (the schema was dropped and migrated again).
  const std::string statement =
      cdc::publication_statement(conn, state, name, table, filter, publish);
  try {
    pg::exec(conn, statement);
  } catch (const DatabaseError& error) {
    if (error.sqlstate() == "42710") return;  // another relay created or changed it meanwhile
    if (error.retryable()) throw;
    throw ConfigError(fmt::format(
        "relay --source cdc: publication {} does not publish {} and this role cannot change "
        "that ({}); run as the table's owner: {}",
        printable(name), table, error.what(), statement));
  }
  log().info("relay {}: {}", options_.relay_id, statement);
}

std::vector<std::string> Publications::streamed() const {
  if (witness_.empty() || unproven_until_ != 0) return {publication_};
  return {publication_, witness_};
}

bool Publications::take_drop_slot_first() { return std::exchange(drop_slot_first_, false); }

// PostgreSQL 15 decodes a change under the catalog as it was when the change was written, and
// looks up every publication the stream names there: one created after the slot's unread WAL was
// written ends the stream with "publication ... does not exist" at the first change, again on
// every start (a slot made before its publication, an --publication given to a relay with an old
// slot, or a table-less slot from before the witness publication). When every publication exists
// now, that is what happened: a slot of the table path's relay is made again (the table is the
// truth: the table path publishes what it held); a table-less slot holds the only copy of its
// events, so it is read without the witness up to the WAL written now, and with it from there.
bool Publications::outlived(PGconn* conn) {
  const std::vector<std::string> names = streamed();
  const cdc::PublicationsPresent found = cdc::publications_present(conn, names);
  if (found.present != names.size()) return false;
  if (!options_.cdc.table_less) {
    log().warn(
        "relay {}: slot {} holds WAL from before its publication {} existed, which "
        "PostgreSQL cannot decode; making the slot again (the table path publishes what it "
        "held)",
        options_.relay_id, slot_, printable(publication_));
    drop_slot_first_ = true;
    return true;
  }
  if (names.size() == 1) {
    throw ConfigError(fmt::format(
        "relay --source cdc --table-less: slot {} holds WAL from before publication {} existed, "
        "which PostgreSQL 15 cannot decode, and the slot holds the only copy of table-less events "
        "(it is not made again). Was the publication dropped and created again? Stream with the "
        "publication the slot was made with (--publication)",
        slot_, printable(publication_)));
  }
  // Unproven up to where the witness began for this slot; if the stream fails again past that
  // (a transaction open across the publication's creation has changes from before it), up to
  // the WAL of now, which that transaction is behind.
  std::optional<cdc::Lsn> until = found.flushed;
  if (!witness_retried_) {
    if (const auto since = cdc_sql::witness_since(conn, options_.schema, slot_)) until = since;
  }
  if (!until) return false;
  witness_retried_ = true;
  unproven_until_ = *until;
  log().warn(
      "relay {}: slot {} holds WAL from before publication {} (the proof that a "
      "table-less message is a producer's) existed; its table-less messages up to {} are "
      "taken unproven, as before this version, and the stream starts again with the proof "
      "from there",
      options_.relay_id, slot_, printable(witness_), cdc::format_lsn(*until));
  return true;
}

}  // namespace outbox::detail
