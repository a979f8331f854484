// Who may connect, and what a refused connection says: the embedded cluster takes no one without
// its password (it used to trust every local OS user, as superuser), and refusals that no retry
// can fix are not retryable (a relay retried a wrong password forever).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "support/test_env.hpp"
#include "unit/contains.hpp"

namespace outbox::testing {
namespace {

DatabaseError connect_error(const std::string& url) {
  try {
    pg::Connection::open(url);
  } catch (const DatabaseError& error) {
    return error;
  }
  ADD_FAILURE() << "connected with " << url;
  return DatabaseError("", "", true);
}

std::string tcp(const std::string& rest) {
  return "host=127.0.0.1 port=" + std::to_string(postgres().port()) + " " + rest;
}

TEST(Connect, TheEmbeddedClusterRefusesAnyoneWithoutItsPassword) {
  // What any local OS user could do before: connect over TCP as the superuser, no password.
  const DatabaseError no_password =
      connect_error(tcp("user=postgres dbname=outbox passfile=/nonexistent/outbox-no-passfile"));
  EXPECT_EQ(no_password.sqlstate(), "28P01") << no_password.what();
  EXPECT_FALSE(no_password.retryable()) << no_password.what();
  EXPECT_TRUE(contains(no_password.what(), "--db-password-file")) << no_password.what();

  const DatabaseError wrong =
      connect_error(tcp("user=postgres dbname=outbox password=Wrong-Password-123"));
  EXPECT_EQ(wrong.sqlstate(), "28P01") << wrong.what();
  EXPECT_FALSE(wrong.retryable());
  EXPECT_FALSE(contains(wrong.what(), "Wrong-Password-123")) << wrong.what();

  // Over the unix socket too; the socket's folder is the server user's alone.
  const std::string socket = postgres().socket_dir().string();
  const DatabaseError local =
      connect_error("host=" + socket + " port=" + std::to_string(postgres().port()) +
                    " user=postgres dbname=outbox passfile=/nonexistent/outbox-no-passfile");
  EXPECT_EQ(local.sqlstate(), "28P01") << local.what();
  struct stat info {};
  ASSERT_EQ(::stat(socket.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST(Connect, RefusalsNoRetryFixesAreNotRetryable) {
  const DatabaseError database = connect_error(postgres().connection_string("no_such_database"));
  EXPECT_EQ(database.sqlstate(), "3D000") << database.what();
  EXPECT_FALSE(database.retryable());

  const DatabaseError malformed =
      connect_error("postgresql://app:Secret-In-Uri@127.0.0.1:badport/x");
  EXPECT_FALSE(malformed.retryable()) << malformed.what();
  EXPECT_FALSE(contains(malformed.what(), "Secret-In-Uri")) << malformed.what();
  EXPECT_TRUE(contains(malformed.what(), "postgresql://app:********@127.0.0.1:badport/x"))
      << malformed.what();

  // Nobody listening is an outage: retry.
  const DatabaseError refused = connect_error("host=127.0.0.1 port=1 connect_timeout=2");
  EXPECT_TRUE(refused.retryable()) << refused.what();
}

}  // namespace
}  // namespace outbox::testing
