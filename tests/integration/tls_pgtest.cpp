// PostgreSQL over TLS with sslmode=verify-full: the embedded cluster serves a certificate signed
// by a CA this test makes with openssl; outbox connects, refuses a server it cannot verify (and
// does not retry that), and a relay publishes over the verified connection.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>

#include "outbox/discard_sink.hpp"
#include "outbox/relay.hpp"
#include "outbox/sink.hpp"
#include "support/test_env.hpp"
#include "unit/contains.hpp"

namespace outbox::testing {
namespace {

namespace fs = std::filesystem;

// A CA and a server certificate for "localhost" (no IP address in it), made with openssl.
struct Certificates {
  fs::path dir;
  fs::path ca, other_ca, server_certificate, server_key;
  Certificates() {
    std::string pattern = (fs::temp_directory_path() / "outbox-tls-XXXXXX").string();
    dir = ::mkdtemp(pattern.data());
    ca = dir / "ca.crt";
    other_ca = dir / "other-ca.crt";
    server_certificate = dir / "server.crt";
    server_key = dir / "server.key";
    const std::string d = dir.string();
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    run("openssl req -x509" + key + " -keyout " + d + "/ca.key -out " + d +
        "/ca.crt -days 2 -subj /CN=outbox-test-ca");
    run("openssl req -x509" + key + " -keyout " + d + "/other-ca.key -out " + d +
        "/other-ca.crt -days 2 -subj /CN=outbox-other-ca");
    run("openssl req" + key + " -keyout " + d + "/server.key -out " + d +
        "/server.csr -subj /CN=localhost");
    run("printf 'subjectAltName=DNS:localhost\\n' > " + d + "/ext");
    run("openssl x509 -req -in " + d + "/server.csr -CA " + d + "/ca.crt -CAkey " + d +
        "/ca.key -CAcreateserial -out " + d + "/server.crt -days 2 -extfile " + d + "/ext");
  }
  ~Certificates() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  static void run(const std::string& command) {
    if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
      throw std::runtime_error("failed: " + command);
    }
  }
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certificates_ = new Certificates();
    EmbeddedPostgresOptions options;
    options.tls_certificate = certificates_->server_certificate;
    options.tls_private_key = certificates_->server_key;
    server_ = new EmbeddedPostgres(options);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete certificates_;
  }
  // The cluster's own string (user, password file, database) over TCP to `host` with TLS
  // verified against `ca`; later keywords override earlier ones.
  static std::string url(const std::string& host, const fs::path& ca) {
    return server_->connection_string() + " host=" + host +
           " hostaddr=127.0.0.1 port=" + std::to_string(server_->port()) +
           " sslmode=verify-full sslrootcert=" + ca.string();
  }
  static Certificates* certificates_;
  static EmbeddedPostgres* server_;
};
Certificates* TlsTest::certificates_ = nullptr;
EmbeddedPostgres* TlsTest::server_ = nullptr;

TEST_F(TlsTest, AVerifiedConnectionIsEncrypted) {
  auto connection = pg::Connection::open(url("localhost", certificates_->ca));
  EXPECT_EQ(pg::exec(connection.get(),
                     "SELECT ssl::text FROM pg_stat_ssl WHERE pid = "
                     "pg_backend_pid()")
                .text(0, 0),
            "true");
}

TEST_F(TlsTest, AServerThatCannotBeVerifiedIsRefusedAndNotRetried) {
  for (const auto& [host, ca] : {std::pair{std::string("localhost"), certificates_->other_ca},
                                 std::pair{std::string("127.0.0.1"), certificates_->ca}}) {
    try {
      pg::Connection::open(url(host, ca));
      ADD_FAILURE() << "connected to " << host << " trusting " << ca;
    } catch (const DatabaseError& e) {
      EXPECT_FALSE(e.retryable()) << e.what();
      EXPECT_TRUE(contains(e.what(), "certificate")) << e.what();
    }
  }
}

TEST_F(TlsTest, ARelayPublishesOverAVerifiedConnection) {
  const std::string verified = url("localhost", certificates_->ca);
  const SchemaName schema("tls_relay");
  migrate(verified, schema);
  auto connection = pg::Connection::open(verified);
  pg::exec(connection.get(),
           "INSERT INTO tls_relay.outbox_events (event_id, aggregate_type, aggregate_id,"
           " aggregate_sequence, event_type, payload) SELECT gen_random_uuid(), 'order', 'o' || i,"
           " 1, 'X', '{}' FROM generate_series(1, 5) i");
  RelayOptions options;
  options.database_url = verified;
  options.schema = schema;
  options.relay_id = "tls";
  Relay relay(options, make_discard_sink());
  ASSERT_TRUE(relay.run_until_idle(std::chrono::seconds(20)));
  EXPECT_EQ(relay.stats().published, 5U);
}

}  // namespace
}  // namespace outbox::testing
