// SchemaName: any text is accepted as exactly the documented shape or refused with a printable
// InvalidArgument; the SQL forms derived from an accepted name stay within PostgreSQL's limits.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "outbox/error.hpp"
#include "outbox/schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bool shaped = !text.empty() && text.size() <= 48 &&
                ((text[0] >= 'a' && text[0] <= 'z') || text[0] == '_') &&
                !text.starts_with("pg_") && text != "information_schema";
  for (const char c : text) {
    shaped = shaped && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  try {
    const outbox::SchemaName schema(text);
    if (!shaped) outbox::fuzz::fail("accepted a name outside the documented shape", text);
    if (schema.name() != text || schema.quoted() != "\"" + std::string(text) + "\"") {
      outbox::fuzz::fail("the name changed", text);
    }
    if (schema.notify_channel().size() > 63) outbox::fuzz::fail("channel over 63 bytes", text);
  } catch (const outbox::InvalidArgument& error) {
    if (shaped) outbox::fuzz::fail("refused a name of the documented shape", text);
    outbox::fuzz::expect_printable_message(error.what(), text);
  }
  return 0;
}
