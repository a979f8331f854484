#include "cdc/slot_admin.hpp"

#include <fmt/format.h>

#include "outbox/relay.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"
#include "pg/params.hpp"

namespace outbox::cdc {

namespace {

// The statements that read the server's clock as a PgTimestamp (microseconds since 2000-01-01),
// whole at compile time: slot_lag runs every second, clock_and_flush at every table poll.
#define OUTBOX_SERVER_CLOCK \
  "((extract(epoch FROM clock_timestamp()) - 946684800) * 1000000)::bigint::text"
constexpr const char* kSlotLagSql =
    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text, "
    "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint::text, " OUTBOX_SERVER_CLOCK
    " FROM pg_replication_slots WHERE slot_name = $1";
constexpr const char* kClockAndFlushSql =
    "SELECT " OUTBOX_SERVER_CLOCK ", pg_current_wal_flush_lsn()::text";
#undef OUTBOX_SERVER_CLOCK

}  // namespace

std::string wal_level(PGconn* conn) {
  return std::string(pg::exec(conn, "SHOW wal_level").text(0, 0));
}

std::uint32_t table_oid(PGconn* conn, const std::string& table) {
  return static_cast<std::uint32_t>(
      pg::exec(conn, "SELECT $1::regclass::oid::bigint", pg::Params().text(table).pointers())
          .int64(0, 0));
}

PublicationState publication_state(PGconn* conn, const std::string& publication,
                                   const std::string& table) {
  const auto found = pg::exec(conn,
                              "SELECT EXISTS (SELECT 1 FROM pg_publication_rel r JOIN "
                              "pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1 AND "
                              "r.prrelid = $2::regclass)::text, "
                              "EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)::text",
                              pg::Params().text(publication).text(table).pointers());
  return {found.text(0, 1) == "true", found.text(0, 0) == "true"};
}

std::string publication_statement(PGconn* conn, const PublicationState& state,
                                  const std::string& publication, const std::string& table,
                                  const std::string& filter, const std::string& publish) {
  if (state.exists) {
    return fmt::format("ALTER PUBLICATION {} ADD TABLE {}{}",
                       pg::quote_identifier(conn, publication), table, filter);
  }
  return fmt::format("CREATE PUBLICATION {} FOR TABLE {}{} WITH (publish = '{}')",
                     pg::quote_identifier(conn, publication), table, filter, publish);
}

bool publication_narrowed(PGconn* conn, const std::string& publication, const std::string& table) {
  const auto shape =
      pg::exec(conn,
               "SELECT p.pubinsert AND p.pubupdate AND r.prqual IS NULL AND r.prattrs IS NULL "
               "FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid "
               "WHERE p.pubname = $1 AND r.prrelid = $2::regclass",
               pg::Params().text(publication).text(table).pointers());
  return shape.rows() == 1 && shape.text(0, 0) != "t";
}

PublicationsPresent publications_present(PGconn* conn, const std::vector<std::string>& names) {
  pg::ArrayLiteral wanted;
  for (const std::string& name : names) wanted.add(name);
  const auto found = pg::exec(conn,
                              "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = "
                              "ANY($1::text[])), pg_current_wal_flush_lsn()::text",
                              pg::Params().array(wanted).pointers());
  return {static_cast<std::size_t>(found.int64(0, 0)), parse_lsn(found.text(0, 1))};
}

namespace {

// $1 empty: every pgoutput slot of this database; else the slot of that name, whatever it is.
constexpr const char* kServerSlotsSql = R"SQL(
WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                          ELSE pg_current_wal_lsn() END AS lsn)
SELECT slot_name,
       (slot_type = 'logical' AND plugin = 'pgoutput' AND database = current_database())::text,
       coalesce(active_pid, 0)::text, coalesce(wal_status, ''),
       pg_wal_lsn_diff(here.lsn, restart_lsn)::bigint,
       pg_wal_lsn_diff(here.lsn, confirmed_flush_lsn)::bigint
FROM pg_catalog.pg_replication_slots, here
WHERE CASE WHEN $1 = '' THEN slot_type = 'logical' AND plugin = 'pgoutput'
                             AND database = current_database()
           ELSE slot_name = $1 END
ORDER BY slot_name)SQL";

std::vector<ServerSlot> read_server_slots(PGconn* conn, const std::string& name) {
  const auto rows = pg::exec(conn, kServerSlotsSql, pg::Params().text(name).pointers());
  const auto optional = [&](int row, int column) -> std::optional<std::int64_t> {
    if (rows.is_null(row, column)) return std::nullopt;
    return rows.int64(row, column);
  };
  std::vector<ServerSlot> slots;
  for (int row = 0; row < rows.rows(); ++row) {
    slots.push_back({std::string(rows.text(row, 0)), rows.text(row, 1) == "true",
                     static_cast<int>(rows.int64(row, 2)), std::string(rows.text(row, 3)),
                     optional(row, 4), optional(row, 5)});
  }
  return slots;
}

}  // namespace

std::vector<ServerSlot> our_slots(PGconn* conn) { return read_server_slots(conn, ""); }

std::optional<ServerSlot> find_slot(PGconn* conn, const std::string& slot) {
  if (slot.empty()) return std::nullopt;
  std::vector<ServerSlot> found = read_server_slots(conn, slot);
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

void drop_slot(PGconn* conn, const std::string& slot) {
  pg::exec(conn, "SELECT pg_drop_replication_slot($1)", pg::Params().text(slot).pointers());
}

std::optional<SlotLag> slot_lag(PGconn* conn, const std::string& slot) {
  const auto result = pg::exec(conn, kSlotLagSql, pg::Params().text(slot).pointers());
  if (result.rows() == 0 || result.is_null(0, 0) || result.is_null(0, 1)) return std::nullopt;
  return SlotLag{result.int64(0, 0), result.int64(0, 1), result.int64(0, 2)};
}

std::optional<int> slot_holder(PGconn* conn, const std::string& slot) {
  const auto result =
      pg::exec(conn, "SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = $1",
               pg::Params().text(slot).pointers());
  if (result.rows() == 0) return std::nullopt;
  if (result.is_null(0, 0)) return 0;
  return static_cast<int>(result.int64(0, 0));
}

SlotActivity slot_activity(PGconn* conn, const std::string& slot) {
  const auto seen =
      pg::exec(conn,
               "SELECT coalesce((SELECT (active_pid IS NOT NULL)::text FROM pg_replication_slots "
               "WHERE slot_name = $1), 'missing'), "
               "(SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
               "AND pid <> pg_backend_pid() AND xact_start < now() - interval '1 second')::text",
               pg::Params().text(slot).pointers());
  const std::string_view state = seen.text(0, 0);
  return {state == "true"    ? SlotState::active
          : state == "false" ? SlotState::inactive
                             : SlotState::missing,
          seen.int64(0, 1)};
}

std::optional<ClockAndFlush> clock_and_flush(PGconn* conn) {
  const auto result = pg::exec(conn, kClockAndFlushSql);
  const std::optional<Lsn> flushed = parse_lsn(result.text(0, 1));
  if (!flushed) return std::nullopt;
  return ClockAndFlush{result.int64(0, 0), *flushed};
}

// No leading zeros, 2 <= n <= kMaxShards, i < n.
std::optional<unsigned> sharding_of(std::string_view rest) {
  if (rest.empty()) return 1U;
  const auto number = [](std::string_view digits) -> std::optional<unsigned> {
    if (digits.empty() || digits.size() > 2 || (digits.size() > 1 && digits[0] == '0')) {
      return std::nullopt;
    }
    unsigned value = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    return value;
  };
  if (!rest.starts_with('_')) return std::nullopt;
  const std::size_t of = rest.find("_of_");
  if (of == std::string_view::npos) return std::nullopt;
  const std::optional<unsigned> shard = number(rest.substr(1, of - 1));
  const std::optional<unsigned> shards = number(rest.substr(of + 4));
  if (!shard || !shards || *shards < 2 || *shards > kMaxShards || *shard >= *shards) {
    return std::nullopt;
  }
  return shards;
}

}  // namespace outbox::cdc
