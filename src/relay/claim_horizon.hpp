#pragma once
// Which untouched rows a claim may take (PollingSource::set_claim_horizon): every one (a polling
// relay), none (touched rows only: a standby of a streaming relay, or a stream that has not read
// a commit yet), or those that occurred before a time (the table path beside a stream: what the
// stream will not bring). Touched rows (a failure's backoff, a released quarantine) are always
// claimable.

#include <cstdint>
#include <string>

namespace outbox::detail {

class ClaimHorizon {
 public:
  static ClaimHorizon everything() { return ClaimHorizon(Kind::everything, 0); }
  static ClaimHorizon touched_only() { return ClaimHorizon(Kind::touched_only, 0); }
  // `pg_micros`: microseconds since 2000-01-01 UTC (PostgreSQL's epoch, cdc::PgTimestamp).
  static ClaimHorizon before(std::int64_t pg_micros) {
    return ClaimHorizon(Kind::before, pg_micros);
  }

  // As the claim's timestamptz parameter: "infinity", "-infinity" or the time in UTC.
  [[nodiscard]] std::string sql_text() const;
  bool operator==(const ClaimHorizon&) const = default;

 private:
  enum class Kind : std::uint8_t { everything, touched_only, before };
  ClaimHorizon(Kind kind, std::int64_t at) : kind_(kind), at_(at) {}
  Kind kind_;
  std::int64_t at_;
};

}  // namespace outbox::detail
