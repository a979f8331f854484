#pragma once
// Least privilege: one PostgreSQL role per part of outbox, each allowed exactly what that part
// does and refused everything else (SQLSTATE 42501). Grant them to your login roles:
//
//   outbox migrate --schema outbox --create-roles
//   GRANT outbox_writer TO order_service;   -- producers
//   GRANT outbox_relay  TO outbox_relay_login;
//   GRANT outbox_inbox  TO billing_consumer;
//   GRANT outbox_admin  TO ops;             -- status, quarantine, cleanup
//
// Migrations stay with the schema's owner.
//
// Roles are per program, not per consumer: to keep one inbox login from marking events done for
// another consumer, list the consumer name with the login (or role) that owns it, as the owner:
//
//   INSERT INTO outbox.outbox_inbox_consumers VALUES ('billing', 'billing_consumer');
//
// A listed name is written and read only by members of its role (row-level security on
// processed_events); an unlisted name is open to every inbox login, as before.

#include <string>

#include "outbox/schema.hpp"

namespace outbox {

struct RoleNames {
  std::string writer;  // enqueue events (insert, allocate sequences), resolve_commit
  std::string relay;   // claim, mark and record failures of events; its own presence row
  std::string inbox;   // record processed event ids (Inbox, KafkaInboxConsumer)
  std::string admin;   // status, quarantine list/retry/skip (audited), retention cleanup
};

// The roles of `schema`: "<schema>_writer", "<schema>_relay", "<schema>_inbox", "<schema>_admin".
RoleNames role_names(const SchemaName& schema);

// Creates the four roles (NOLOGIN) where missing and sets their privileges on the schema's tables
// to exactly what each part needs (column by column where a role writes some columns of a row),
// revoking anything else they held there, and turns on processed_events' row-level security with
// its policies (consumer names listed in outbox_inbox_consumers; the admin's cleanup sees all).
// Idempotent; run it again after every migrate (a new table gets its grants then). One transaction:
// all or nothing. Needs a connection that may create roles and grant on the tables (their owner
// with CREATEROLE, or a superuser), idle, with the schema migrated to the latest version. Throws
// DatabaseError (42501 when the connection may not), InvalidArgument when `conn` is busy, Error
// when the schema is not at the latest version.
RoleNames create_roles(PGconn* conn, const SchemaName& schema);

}  // namespace outbox
