// Consumer-side schema evolution: which version an event type is read at, the steps that bring an
// older payload to it, and what cannot be brought. No I/O.
#include "outbox/upcaster.hpp"

#include <gtest/gtest.h>

#include "outbox/error.hpp"

namespace outbox {
namespace {

ConsumedEvent event(const std::string& type, std::int32_t version, std::string payload) {
  ConsumedEvent e;
  e.event_type = type;
  e.schema_version = version;
  e.payload = std::move(payload);
  return e;
}

Upcasters order_placed() {
  Upcasters upcasters;
  // v1 {"total":42} -> v2 {"amount":42} -> v3 {"amount":42,"currency":"EUR"}
  upcasters.add("OrderPlaced", 1, [](std::string_view p) {
    std::string s(p);
    s.replace(s.find("total"), 5, "amount");
    return s;
  });
  upcasters.add("OrderPlaced", 2, [](std::string_view p) {
    std::string s(p);
    s.insert(s.size() - 1, R"(,"currency":"EUR")");
    return s;
  });
  return upcasters;
}

TEST(Upcasters, AnOldPayloadIsBroughtStepByStepToTheConsumersVersion) {
  const Upcasters upcasters = order_placed();
  EXPECT_EQ(upcasters.current_version("OrderPlaced"), 3);
  ConsumedEvent e = event("OrderPlaced", 1, R"({"total":42})");
  upcasters.upcast(e);
  EXPECT_EQ(e.payload, R"({"amount":42,"currency":"EUR"})");
  EXPECT_EQ(e.schema_version, 3);
  ConsumedEvent current = event("OrderPlaced", 3, R"({"amount":1,"currency":"USD"})");
  upcasters.upcast(current);
  EXPECT_EQ(current.payload, R"({"amount":1,"currency":"USD"})");
}

TEST(Upcasters, ANewerVersionIsUnknownAndNeverUpcast) {
  const Upcasters upcasters = order_placed();
  ConsumedEvent newer = event("OrderPlaced", 4, "{}");
  EXPECT_NE(upcasters.unknown(newer).find("schema_version 4 of OrderPlaced is newer than this "
                                          "consumer knows (3)"),
            std::string::npos);
  EXPECT_THROW(upcasters.upcast(newer), InvalidArgument);
  EXPECT_EQ(newer.payload, "{}");
}

TEST(Upcasters, AMissingStepIsUnknown) {
  Upcasters upcasters;
  upcasters.current("OrderPaid", 3).add("OrderPaid", 2, [](std::string_view p) {
    return std::string(p);
  });
  EXPECT_EQ(upcasters.unknown(event("OrderPaid", 1, "{}")),
            "OrderPaid has no upcaster from schema_version 1 (to reach 3)");
  EXPECT_EQ(upcasters.unknown(event("OrderPaid", 2, "{}")), "");
}

TEST(Upcasters, TypesWithoutStepsAreNotChecked) {
  const Upcasters upcasters = order_placed();
  EXPECT_EQ(upcasters.current_version("OrderShipped"), std::nullopt);
  ConsumedEvent e = event("OrderShipped", 9, "{}");
  EXPECT_EQ(upcasters.unknown(e), "");
  upcasters.upcast(e);
  EXPECT_EQ(e.schema_version, 9);
  EXPECT_TRUE(Upcasters().empty());
}

TEST(Upcasters, RefusesWhatCanNeverRun) {
  Upcasters upcasters = order_placed();
  const auto same = [](std::string_view p) { return std::string(p); };
  EXPECT_THROW(upcasters.add("OrderPlaced", 1, same), InvalidArgument);  // twice
  EXPECT_THROW(upcasters.add("OrderPlaced", 0, same), InvalidArgument);
  EXPECT_THROW(upcasters.add("", 1, same), InvalidArgument);
  EXPECT_THROW(upcasters.add("X", 1, nullptr), InvalidArgument);
  EXPECT_THROW(upcasters.current("X", 0), InvalidArgument);
}

}  // namespace
}  // namespace outbox
