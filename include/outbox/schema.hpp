#pragma once
// The PostgreSQL schema that holds outbox's tables, and the migrations that create it.

#include <chrono>
#include <string>
#include <string_view>

typedef struct pg_conn PGconn;  // from libpq-fe.h; repeated so this header needs no libpq

namespace outbox {

// A validated PostgreSQL schema name: 1..48 bytes of [a-z0-9_], starting with a letter or '_',
// none of PostgreSQL's own schemas (anything starting with "pg_", information_schema). Stricter
// than PostgreSQL so the name never needs case folding games and the derived names (the NOTIFY
// channel) stay within PostgreSQL's 63-byte limit.
class SchemaName {
 public:
  // The default schema: "outbox".
  SchemaName();
  // Throws InvalidArgument saying which rule the name breaks.
  explicit SchemaName(std::string_view name);

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // The double-quoted identifier, ready to put in SQL.
  [[nodiscard]] const std::string& quoted() const noexcept { return quoted_; }
  // `"schema"."table"` for one of outbox's own tables.
  [[nodiscard]] std::string table(std::string_view table) const;
  // The LISTEN/NOTIFY channel the outbox table announces new rows on.
  [[nodiscard]] std::string notify_channel() const;
  // The prefix of the logical decoding messages a table-less producer emits ("outbox:<name>"):
  // a relay streams every message of its database and takes only its schema's.
  [[nodiscard]] std::string message_prefix() const;
  // The prefix of the logical message `outbox replay` emits ("outbox-replay:<schema>"): CDC
  // relays then check their next event of every aggregate against the table.
  [[nodiscard]] std::string replay_message_prefix() const;

 private:
  std::string name_;
  std::string quoted_;
};

struct MigrationReport {
  int from_version = 0;  // highest version recorded before the call
  int to_version = 0;    // highest version recorded after the call
  int applied = 0;       // how many migrations this call applied
};

// The highest migration version this build knows.
int latest_schema_version();

// How long a migration waits for a lock on outbox's tables by default. A DDL statement that waits
// for a lock (behind a long transaction that wrote to outbox_events) makes every later writer of
// the table wait behind it: producers would stall for as long as the blocker lives.
inline constexpr std::chrono::milliseconds kMigrateLockTimeout{5000};

// Applies every migration not yet recorded in `schema.outbox_schema_migrations`, all in one
// transaction under an advisory lock: concurrent callers serialize, the second applies nothing,
// and a failure leaves the schema as it was. Idempotent. `conn` must be idle (not inside a
// transaction). Waits for other migrate calls as long as they run, but at most `lock_timeout`
// for each lock its DDL needs (0: no limit); then nothing is changed and a retryable
// DatabaseError (SQLSTATE 55P03) says so. Throws DatabaseError (with SQLSTATE) when the server
// refuses, InvalidArgument when `conn` is busy or `lock_timeout` negative, and Error when the
// database holds a newer schema than this build knows.
MigrationReport migrate(PGconn* conn, const SchemaName& schema,
                        std::chrono::milliseconds lock_timeout = kMigrateLockTimeout);
// Same, on a new connection to `database_url` (a libpq connection string or URI; empty: PG* vars).
MigrationReport migrate(const std::string& database_url, const SchemaName& schema,
                        std::chrono::milliseconds lock_timeout = kMigrateLockTimeout);

}  // namespace outbox
