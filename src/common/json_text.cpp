#include "common/json_text.hpp"

#include "common/event_headers.hpp"
#include "common/jsonb_scan.hpp"

namespace outbox::detail {

std::string check_jsonb_document(std::string_view text) { return scan_jsonb(text).problem; }

HeaderScan scan_header_object(std::string_view text) {
  JsonbScan scan = scan_jsonb(text, /*collect_members=*/true);
  HeaderScan result;
  if (!scan.problem.empty()) {
    result.problem = std::move(scan.problem);
    return result;
  }
  if (!scan.is_object) {
    result.problem = "must be a JSON object";
    return result;
  }
  for (const auto& [key, member] : scan.members) {
    if (!member.is_string) {
      result.problem = "value of \"" + key + "\" must be a string";
      return result;
    }
    if (key.empty()) {
      result.problem = "has an empty key";
      return result;
    }
    if (is_reserved_header(key)) {
      result.problem = "uses the reserved name \"" + key +
                       "\": outbox sets it from the event itself; choose another header name";
      return result;
    }
    result.message_bytes += kafka_header_bytes(key.size(), member.value_bytes);
  }
  result.text_bytes = scan.text_bytes;
  return result;
}

std::string check_header_object(std::string_view text) { return scan_header_object(text).problem; }

}  // namespace outbox::detail
