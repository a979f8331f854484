// SchemaName: which names are accepted, what a rejection says, and the SQL forms derived from it.

#include <gtest/gtest.h>

#include <string>
#include <typeinfo>

#include "contains.hpp"
#include "outbox/error.hpp"
#include "outbox/schema.hpp"

namespace outbox {
namespace {

// The message of the InvalidArgument that SchemaName(name) throws; fails the test if it throws
// anything else or nothing.
std::string rejection_of(const std::string& name) {
  try {
    SchemaName schema(name);
    ADD_FAILURE() << "schema name \"" << name << "\" was accepted";
  } catch (const InvalidArgument& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "schema name \"" << name << "\" threw a " << typeid(error).name()
                  << " instead of InvalidArgument: " << error.what();
  }
  return {};
}

// --- accepted names ---

TEST(SchemaName, DefaultIsOutbox) {
  const SchemaName schema;
  EXPECT_EQ(schema.name(), "outbox");
  EXPECT_EQ(schema.quoted(), "\"outbox\"");
}

TEST(SchemaName, AcceptsLowerCaseLettersDigitsAndUnderscore) {
  for (const std::string name :
       {"a", "_", "outbox", "orders_outbox", "_private", "v2", "a1_b2_c3", "p", "pg", "pgx",
        "pg1_schema", "abcdefghijklmnopqrstuvwxyz_0123456789"}) {
    EXPECT_NO_THROW({
      const SchemaName schema(name);
      EXPECT_EQ(schema.name(), name);
    }) << name;
  }
}

TEST(SchemaName, Accepts48Bytes) {
  const std::string name(48, 'a');
  EXPECT_EQ(SchemaName(name).name(), name);
}

// --- rejected names: the exception names the rule ---

TEST(SchemaName, RejectsEmpty) { EXPECT_TRUE(contains(rejection_of(""), "empty")); }

TEST(SchemaName, Rejects49BytesAndMore) {
  EXPECT_TRUE(contains(rejection_of(std::string(49, 'a')), "longer than 48 bytes"));
  EXPECT_TRUE(contains(rejection_of(std::string(64, 'a')), "longer than 48 bytes"));
  EXPECT_TRUE(contains(rejection_of(std::string(1000, 'a')), "longer than 48 bytes"));
}

TEST(SchemaName, RejectsUpperCase) {
  EXPECT_TRUE(contains(rejection_of("Outbox"), "lower-case"));
  EXPECT_TRUE(contains(rejection_of("outBox"), "'B'"));
  EXPECT_TRUE(contains(rejection_of("OUTBOX"), "lower-case"));
}

TEST(SchemaName, RejectsLeadingDigit) {
  EXPECT_TRUE(contains(rejection_of("1outbox"), "start with a lower-case letter or '_'"));
  EXPECT_TRUE(contains(rejection_of("0"), "start with"));
}

// The advice every refusal gives states the rule the check applies: "_x" is accepted, so the
// advice may not say "starting with a letter" alone.
TEST(SchemaName, TheAdviceStatesTheRuleTheCheckApplies) {
  EXPECT_EQ(SchemaName("_x").name(), "_x");
  EXPECT_TRUE(contains(rejection_of("Outbox"), "starting with a letter or '_'"));
  EXPECT_TRUE(contains(rejection_of("1outbox"), "starting with a letter or '_'"));
}

TEST(SchemaName, RejectsPgPrefix) {
  EXPECT_TRUE(contains(rejection_of("pg_"), "reserved by PostgreSQL"));
  EXPECT_TRUE(contains(rejection_of("pg_catalog"), "reserved by PostgreSQL"));
  EXPECT_TRUE(contains(rejection_of("pg_outbox"), "reserved by PostgreSQL"));
}

// Issue "Hardening" #13: `--schema information_schema` was accepted.
TEST(SchemaName, RejectsPostgresOwnSchemas) {
  EXPECT_TRUE(contains(rejection_of("information_schema"), "PostgreSQL's own schema"));
  EXPECT_TRUE(contains(rejection_of("information_schema"), "e.g. --schema outbox"));
  for (const std::string name :
       {"pg_catalog", "pg_toast", "pg_temp", "pg_temp_3", "pg_toast_temp_1", "pg_anything"}) {
    EXPECT_TRUE(contains(rejection_of(name), "reserved by PostgreSQL")) << name;
  }
  EXPECT_NO_THROW(SchemaName("information_schema_2"));
  EXPECT_NO_THROW(SchemaName("my_information_schema"));
}

TEST(SchemaName, RejectsQuotes) {
  EXPECT_TRUE(contains(rejection_of("out\"box"), "contains the character '\"'"));
  EXPECT_TRUE(contains(rejection_of("out'box"), "contains the character '''"));
  EXPECT_TRUE(contains(rejection_of("\"outbox\""), "start with"));
}

TEST(SchemaName, RejectsSpaceAndPunctuation) {
  EXPECT_TRUE(contains(rejection_of("out box"), "contains the character ' '"));
  EXPECT_TRUE(contains(rejection_of("outbox "), "contains the character ' '"));
  EXPECT_TRUE(contains(rejection_of("out-box"), "contains the character '-'"));
  EXPECT_TRUE(contains(rejection_of("out.box"), "contains the character '.'"));
  EXPECT_TRUE(contains(rejection_of("out\tbox"), "contains the character '\\x09'"));
}

TEST(SchemaName, RejectsNulByte) {
  EXPECT_TRUE(contains(rejection_of(std::string("out\0box", 7)), "invalid schema name"));
}

// The message shows control bytes escaped, so a NUL cannot cut it short.
TEST(SchemaName, RejectionOfNulByteNamesTheRule) {
  EXPECT_TRUE(contains(rejection_of(std::string("out\0box", 7)), "contains the character"));
}

TEST(SchemaName, RejectsSqlInjectionAttempts) {
  EXPECT_TRUE(contains(rejection_of("x\"; DROP TABLE y; --"), "contains the character '\"'"));
  EXPECT_TRUE(contains(rejection_of("x;drop_table_y"), "contains the character ';'"));
  EXPECT_TRUE(contains(rejection_of("outbox;"), "contains the character ';'"));
  EXPECT_TRUE(contains(rejection_of("x/*comment*/"), "contains the character '/'"));
  EXPECT_TRUE(contains(rejection_of("x--"), "contains the character '-'"));
}

TEST(SchemaName, RejectsNonAsciiBytes) {
  // "café" in UTF-8: the é is two bytes, both >= 0x80.
  EXPECT_TRUE(contains(rejection_of("caf\xC3\xA9"), "contains the character '\\xc3'"));
  EXPECT_TRUE(contains(rejection_of("\xC3\xA9t\xC3\xA9"), "start with"));
  EXPECT_TRUE(
      contains(rejection_of(std::string("a") + static_cast<char>(0xFF)), "contains the character"));
}

TEST(SchemaName, RejectionQuotesTheNameAndSuggestsAFix) {
  const std::string message = rejection_of("Bad Name");
  EXPECT_TRUE(contains(message, "invalid schema name \"Bad Name\""));
  EXPECT_TRUE(contains(message, "e.g. --schema outbox"));
}

TEST(SchemaName, RejectionIsNotRetryable) {
  try {
    SchemaName schema("");
    FAIL() << "empty name accepted";
  } catch (const Error& error) {
    EXPECT_FALSE(error.retryable());
  }
}

// --- derived SQL forms ---

TEST(SchemaName, QuotedIsDoubleQuotedName) {
  EXPECT_EQ(SchemaName("orders_outbox").quoted(), "\"orders_outbox\"");
  EXPECT_EQ(SchemaName("_").quoted(), "\"_\"");
}

TEST(SchemaName, TableIsQuotedSchemaDotQuotedTable) {
  EXPECT_EQ(SchemaName("orders_outbox").table("outbox_events"),
            "\"orders_outbox\".\"outbox_events\"");
  EXPECT_EQ(SchemaName().table("outbox_aggregate_sequences"),
            "\"outbox\".\"outbox_aggregate_sequences\"");
}

TEST(SchemaName, NotifyChannelIsDerivedFromTheName) {
  EXPECT_EQ(SchemaName().notify_channel(), "outbox_outbox_events");
  EXPECT_EQ(SchemaName("billing").notify_channel(), "billing_outbox_events");
}

TEST(SchemaName, NotifyChannelOfTheLongestLegalNameFitsPostgresIdentifierLimit) {
  // PostgreSQL truncates identifiers to NAMEDATALEN - 1 = 63 bytes; a truncated channel name
  // would make LISTEN and NOTIFY silently disagree.
  const SchemaName longest(std::string(48, 'z'));
  EXPECT_LE(longest.notify_channel().size(), 63U);
  EXPECT_EQ(longest.notify_channel().substr(0, 48), std::string(48, 'z'));
}

TEST(SchemaName, NotifyChannelsOfDistinctSchemasDiffer) {
  EXPECT_NE(SchemaName("a").notify_channel(), SchemaName("b").notify_channel());
  EXPECT_NE(SchemaName(std::string(48, 'a')).notify_channel(),
            SchemaName(std::string(47, 'a')).notify_channel());
}

}  // namespace
}  // namespace outbox
