// Secrets in connection strings and Kafka properties: found, redacted by position, scrubbed from
// messages that quote them.

#include "common/redact.hpp"

#include <gtest/gtest.h>

#include "contains.hpp"

namespace outbox::detail {
namespace {

TEST(Redact, TheUrisPasswordAndSecretParametersAreRedacted) {
  EXPECT_EQ(redact_connection_string("postgresql://app:pw1234@db.example:5432/outbox"),
            "postgresql://app:********@db.example:5432/outbox");
  EXPECT_EQ(redact_connection_string("postgres://app:p%40ss@h/db?sslmode=require&password=two&"
                                     "sslpassword=three"),
            "postgres://app:********@h/db?sslmode=require&password=********&sslpassword=********");
  // No password: nothing to hide, and the user name stays readable.
  EXPECT_EQ(redact_connection_string("postgresql://app@h/db"), "postgresql://app@h/db");
  EXPECT_EQ(redact_connection_string("postgresql://h:5432/db"), "postgresql://h:5432/db");
}

TEST(Redact, KeywordValuesQuotedOrBareAreRedacted) {
  EXPECT_EQ(redact_connection_string("host=h password=s3cret dbname=x"),
            "host=h password=******** dbname=x");
  EXPECT_EQ(redact_connection_string("host=h password = 'two words \\' quote' user=u"),
            "host=h password = ******** user=u");
  EXPECT_EQ(redact_connection_string("sslpassword=k3y host=h"), "sslpassword=******** host=h");
  // A dbname that is itself a connection string (libpq expands it).
  EXPECT_EQ(redact_connection_string("dbname='postgresql://a:hidden@h/db' connect_timeout=5"),
            "dbname='postgresql://a:********@h/db' connect_timeout=5");
  // Malformed strings libpq would refuse still lose the value after a secret keyword.
  EXPECT_EQ(redact_connection_string("host=h password s3cret"), "host=h password ********");
}

// A keyword libpq does not know may be a misspelt password: in a connection string its value is
// hidden (libpq refuses the string, and the message quoting it must not print the password).
TEST(Redact, AnUnknownKeywordsValueInAConnectionStringIsRedacted) {
  EXPECT_EQ(redact_connection_string("host=h passwor=S3cretPw9 dbname=x"),
            "host=h passwor=******** dbname=x");
  EXPECT_EQ(redact_connection_string("postgresql://h/db?passwrd=S3cretPw9&sslmode=require"),
            "postgresql://h/db?passwrd=********&sslmode=require");
  const auto secrets = connection_secrets("user=u pasword='S3cret Pw9'");
  EXPECT_NE(std::find(secrets.begin(), secrets.end(), "S3cret Pw9"), secrets.end());
  // Known keywords stay readable, and text naming no libpq keyword is no connection string:
  // any command-line argument is searched, and "--max-attempts=0x10" hides nothing.
  EXPECT_EQ(redact_connection_string("host=h sslmode=require options='-c x=y'"),
            "host=h sslmode=require options='-c x=y'");
  EXPECT_TRUE(connection_secrets("--max-attempts=0x10").empty());
  EXPECT_TRUE(connection_secrets("linger.ms=5000").empty());
}

TEST(Redact, SecretsAreFoundInTheFormsLibpqReadsThem) {
  const auto secrets = connection_secrets("postgresql://app:p%40ssword@h/db");
  EXPECT_NE(std::find(secrets.begin(), secrets.end(), "p%40ssword"), secrets.end());
  EXPECT_NE(std::find(secrets.begin(), secrets.end(), "p@ssword"), secrets.end());
  const auto quoted = connection_secrets("password='it\\'s long'");
  EXPECT_NE(std::find(quoted.begin(), quoted.end(), "it's long"), quoted.end());
}

TEST(Redact, ScrubReplacesEveryOccurrenceButNotTinySecrets) {
  EXPECT_EQ(scrub("bad token \"hunter2x\" near hunter2x", {"hunter2x"}),
            "bad token \"********\" near ********");
  EXPECT_EQ(scrub("connection refused", {"e"}), "connection refused");
}

TEST(Redact, KafkaPropertiesThatMayHoldSecretsAreKnown) {
  for (const char* key : {"sasl.password", "sasl.pasword", "ssl.key.password", "ssl.key.pem",
                          "sasl.oauthbearer.client.secret", "ssl.keystore.password",
                          "sasl.jaas.config", "SASL.USERNAME"}) {
    EXPECT_TRUE(is_secret_kafka_property(key)) << key;
  }
  for (const char* key : {"linger.ms", "bootstrap.servers", "compression.type", "acks"}) {
    EXPECT_FALSE(is_secret_kafka_property(key)) << key;
  }
}

}  // namespace
}  // namespace outbox::detail
