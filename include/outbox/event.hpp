#pragma once
// Events as the producer writes them (NewEvent) and as the relay reads them back (Event).

#include <array>
#include <chrono>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

// A 128-bit event id. New ids are UUIDv7 (RFC 9562): a 48-bit millisecond timestamp followed by
// random bits, so ids made later sort later and B-tree inserts stay at the right edge.
class EventId {
 public:
  EventId() = default;
  explicit EventId(const std::array<std::uint8_t, 16>& bytes) : bytes_(bytes) {}

  // Thread safe. Ids from one process are strictly increasing (a counter fills the
  // sub-millisecond bits), ids from different processes are unique with overwhelming probability.
  static EventId generate();
  // Accepts the canonical 8-4-4-4-12 hex form, any case. Returns nullopt for anything else.
  static std::optional<EventId> parse(std::string_view text);

  [[nodiscard]] std::string to_string() const;  // lower-case canonical form
  [[nodiscard]] const std::array<std::uint8_t, 16>& bytes() const noexcept { return bytes_; }
  [[nodiscard]] int version() const noexcept { return bytes_[6] >> 4; }
  [[nodiscard]] bool is_nil() const noexcept { return bytes_ == std::array<std::uint8_t, 16>{}; }

  auto operator<=>(const EventId&) const = default;

 private:
  std::array<std::uint8_t, 16> bytes_{};
};

// What a service enqueues. The library fills in the event id (unless given), the per-aggregate
// sequence and the timestamps.
struct NewEvent {
  std::string aggregate_type;       // e.g. "order"; non-empty, at most 255 bytes
  std::string aggregate_id;         // e.g. "4711"; non-empty, at most 255 bytes; Kafka message key
  std::string event_type;           // e.g. "OrderPlaced"; non-empty, at most 255 bytes
  std::string payload;              // a JSON document (object, array or scalar)
  std::string headers = "{}";       // a JSON object of string values, passed on as broker headers
  std::int32_t schema_version = 1;  // >= 1
  std::optional<EventId> event_id{};  // supply one to make a retried request idempotent
  // A W3C trace context (https://www.w3.org/TR/trace-context/): "00-<32 hex trace id>-<16 hex
  // parent id>-<2 hex flags>". Stored as the header "traceparent", which every sink passes on as
  // a message header, so a consumer's span can continue the producer's trace. Empty: none.
  std::string traceparent{};
  // Publish no earlier than this long after the transaction (available_at = now() + it). Per-
  // aggregate order holds: the aggregate's later events wait behind it. 0: at once. At most
  // kMaxDeliverAfter; not with ProducerOptions::table_less (a delayed event needs its row).
  std::chrono::milliseconds deliver_after{0};
};
inline constexpr std::chrono::hours kMaxDeliverAfter{24 * 365};

// A stored event, as the relay claims it and a sink publishes it.
struct Event {
  EventId event_id;
  std::string aggregate_type;
  std::string aggregate_id;
  std::int64_t aggregate_sequence = 0;
  std::string event_type;
  std::int32_t schema_version = 1;
  std::string payload;
  std::string headers;      // JSON object
  std::string occurred_at;  // ISO 8601, as PostgreSQL prints timestamptz
  std::int32_t attempt_count = 0;
};

}  // namespace outbox
