// See cluster_cache.hpp.

#include "testing/cluster_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <system_error>

#include "common/log.hpp"

namespace outbox::detail {

namespace fs = std::filesystem;

fs::path cached_cluster(const fs::path& bin_dir, const OsUser& user) {
  constexpr std::string_view kCacheFormat = "1";
  const char* cache = std::getenv("OUTBOX_EMBEDDED_PG_CACHE");
  if (cache == nullptr || *cache == '\0') return {};
  struct stat server {};
  if (::stat((bin_dir / "postgres").c_str(), &server) != 0) return {};
  const std::size_t key = std::hash<std::string>{}(fmt::format(
      "{}|{}|{}|{}|{}", bin_dir.string(), server.st_size, server.st_mtime, user.uid, kCacheFormat));
  return fs::absolute(cache) / fmt::format("cluster-{:016x}", key);
}

std::optional<std::string> copy_cached_cluster(const fs::path& cached, const fs::path& data_dir,
                                               const OsUser& user) {
  // Only a cluster this user made and nobody else can change: another local user's could carry
  // settings (an archive_command) that run commands as the server's user.
  struct stat entry {};
  if (::lstat(cached.c_str(), &entry) != 0 || !S_ISDIR(entry.st_mode) ||
      entry.st_uid != ::geteuid() || (entry.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return std::nullopt;
  }
  std::error_code error;
  const std::string password = read_file_from(cached / "password");
  if (password.empty() || !fs::exists(cached / "data" / "PG_VERSION", error)) return std::nullopt;
  fs::copy(cached / "data", data_dir, fs::copy_options::recursive, error);
  if (!error && user.switch_user) {
    for (auto it = fs::recursive_directory_iterator(data_dir, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      if (::lchown(it->path().c_str(), user.uid, user.gid) != 0) {
        error = std::error_code(errno, std::generic_category());
      }
    }
    if (!error && ::chown(data_dir.c_str(), user.uid, user.gid) != 0) {
      error = std::error_code(errno, std::generic_category());
    }
  }
  if (error) {
    detail::log().warn(
        "embedded PostgreSQL: cannot copy the cached cluster {} ({}); running initdb",
        cached.string(), error.message());
    std::error_code ignored;
    fs::remove_all(data_dir, ignored);
    return std::nullopt;
  }
  return password;
}

void save_cached_cluster(const fs::path& cached, const fs::path& data_dir,
                         const std::string& password) {
  std::error_code error;
  if (fs::exists(cached, error)) return;
  // Restricted only when made here: a folder the user named (even /tmp) keeps its modes.
  if (fs::create_directories(cached.parent_path(), error)) {
    fs::permissions(cached.parent_path(), fs::perms::owner_all, error);
  }
  const fs::path staging =
      cached.parent_path() / fmt::format("{}.{}.tmp", cached.filename().string(), ::getpid());
  fs::remove_all(staging, error);
  fs::create_directory(staging, error);
  fs::permissions(staging, fs::perms::owner_all, error);
  if (!error) fs::copy(data_dir, staging / "data", fs::copy_options::recursive, error);
  if (!error) {
    ScopedFd fd(
        ::open((staging / "password").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0 || ::write(fd.get(), password.data(), password.size()) !=
                            static_cast<ssize_t>(password.size())) {
      error = std::error_code(errno, std::generic_category());
    }
  }
  if (!error) fs::rename(staging, cached, error);  // fails when another saved it first
  if (error) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
  }
}

}  // namespace outbox::detail
