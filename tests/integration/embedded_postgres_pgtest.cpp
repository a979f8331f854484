// The initdb cache of the embedded PostgreSQL (OUTBOX_EMBEDDED_PG_CACHE, which make test sets to
// save about a second per test process): a later cluster is a copy of what the first one's initdb
// wrote, its password included, and a cache entry that another user could have changed is never
// copied. The cache falls back to initdb silently, so without this test only the suite's time
// would show that it stopped working.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "outbox/testing/embedded_postgres.hpp"
#include "pg/connection.hpp"

namespace outbox::testing {
namespace {

namespace fs = std::filesystem;

class EmbeddedPostgresCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* before = std::getenv("OUTBOX_EMBEDDED_PG_CACHE")) previous_ = before;
    std::string pattern = (fs::temp_directory_path() / "outbox-pg-cache-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    cache_ = dir_ / "cache";  // made by the first cluster
    ::setenv("OUTBOX_EMBEDDED_PG_CACHE", cache_.c_str(), 1);
  }
  void TearDown() override {
    if (previous_) {
      ::setenv("OUTBOX_EMBEDDED_PG_CACHE", previous_->c_str(), 1);
    } else {
      ::unsetenv("OUTBOX_EMBEDDED_PG_CACHE");
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // What initdb chose for the cluster: the same in a copy, different for every initdb.
  static std::string system_identifier() {
    EmbeddedPostgres server;
    pg::Connection connection = pg::Connection::open(server.connection_string(), "cache-test");
    return std::string(
        pg::exec(connection.get(), "SELECT system_identifier::text FROM pg_control_system()")
            .text(0, 0));
  }

  // The cache's entries (cluster-<key>; a staging folder would end in .tmp).
  std::vector<fs::path> entries() const {
    std::vector<fs::path> found;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(cache_, error)) found.push_back(entry.path());
    return found;
  }

  std::optional<std::string> previous_;
  fs::path dir_;
  fs::path cache_;
};

TEST_F(EmbeddedPostgresCache, ALaterClusterCopiesTheFirstsInitdbAndAnEntryOthersCanWriteIsNot) {
  const std::string first = system_identifier();
  const std::vector<fs::path> saved = entries();
  ASSERT_EQ(saved.size(), 1U) << "the first cluster saved no entry (or more than one)";
  EXPECT_EQ(saved[0].filename().string().rfind("cluster-", 0), 0U) << saved[0];
  struct stat folder {};
  ASSERT_EQ(::stat(cache_.c_str(), &folder), 0);
  EXPECT_EQ(folder.st_mode & 0077, 0U) << "the cache folder made here is the user's alone";
  struct stat password {};
  ASSERT_EQ(::stat((saved[0] / "password").c_str(), &password), 0);
  EXPECT_EQ(password.st_mode & 0077, 0U) << "the saved password is the user's alone";

  // Copied: the same cluster identity, and the copied password lets it in.
  EXPECT_EQ(system_identifier(), first);

  // Group-writable: another user could have planted settings in it; initdb instead.
  fs::permissions(saved[0], fs::perms::group_write, fs::perm_options::add);
  EXPECT_NE(system_identifier(), first);
}

}  // namespace
}  // namespace outbox::testing
