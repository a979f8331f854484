#pragma once
// The cache of initdb's work ($OUTBOX_EMBEDDED_PG_CACHE, see outbox/testing/embedded_postgres.hpp):
// where a cluster for this server and OS user is kept, copying it into a new cluster's folder, and
// keeping a fresh one for the next. Not thread-safe within a process; safe across processes (a
// cluster is saved by rename, so a reader sees all of it or none).

#include <filesystem>
#include <optional>
#include <string>

#include "testing/pg_tools.hpp"

namespace outbox::detail {

// $OUTBOX_EMBEDDED_PG_CACHE/cluster-<key>: one per server binary (its folder, size and time, so
// an upgrade in place makes a new one) and OS user, and version of the initdb arguments
// (EmbeddedPostgres's run_initdb; bump kCacheFormat when they change). Empty: no cache.
std::filesystem::path cached_cluster(const std::filesystem::path& bin_dir, const OsUser& user);

// A copy of the cached cluster in `data_dir`, owned by `user`; returns its superuser password.
// nullopt (and nothing left behind) when there is none or it cannot be copied: initdb then.
std::optional<std::string> copy_cached_cluster(const std::filesystem::path& cached,
                                               const std::filesystem::path& data_dir,
                                               const OsUser& user);

// Keeps what initdb wrote in `data_dir` (before the server ever ran), with its superuser
// `password`, for the next cluster: copied aside, then renamed into place, so a concurrent reader
// sees all of it or none. Best effort: a failure costs the next cluster its initdb, nothing else.
void save_cached_cluster(const std::filesystem::path& cached, const std::filesystem::path& data_dir,
                         const std::string& password);

}  // namespace outbox::detail
