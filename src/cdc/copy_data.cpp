// The streaming replication protocol's CopyData messages (XLogData, primary keepalive), the
// standby status update, and PostgreSQL's timestamps and LSN text (pgoutput.hpp). No I/O.

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>

#include "cdc/pgoutput.hpp"
#include "cdc/wire_reader.hpp"

// Layouts: PostgreSQL 15, src/backend/replication/walsender.c (XLogData, keepalive;
// ProcessStandbyReplyMessage), as documented in "Streaming Replication Protocol".

namespace outbox::cdc {
namespace {

// 2000-01-01 00:00:00 UTC in microseconds since 1970-01-01.
constexpr PgTimestamp kPgEpochInUnixMicros = 946'684'800'000'000;
constexpr std::size_t kXLogDataHeaderSize = 1 + 8 + 8 + 8;
void put_u64(char* out, std::uint64_t value) {
  for (int i = 7; i >= 0; --i) {
    *out++ = static_cast<char>((value >> (8U * static_cast<unsigned>(i))) & 0xFFU);
  }
}

CopyDataMessage decode_xlog_data(std::string_view bytes) {
  Reader in(bytes, "XLogData", 1);
  XLogData data;
  in.u64(data.wal_start, "the WAL start");
  in.u64(data.wal_end, "the WAL end");
  in.i64(data.send_time, "the send time");
  if (!in.ok()) return in.error();
  data.payload = bytes.substr(kXLogDataHeaderSize);
  return data;
}

CopyDataMessage decode_keepalive(std::string_view bytes) {
  Reader in(bytes, "primary keepalive", 1);
  PrimaryKeepalive keepalive;
  std::uint8_t reply = 0;
  in.u64(keepalive.wal_end, "the WAL end");
  in.i64(keepalive.send_time, "the send time");
  if (in.u8(reply, "the reply-requested flag") && reply > 1) {
    in.fail(fmt::format("the reply-requested flag is {}, not 0 or 1", reply));
  }
  if (!in.finish()) return in.error();
  keepalive.reply_requested = reply == 1;
  return keepalive;
}

}  // namespace

CopyDataMessage decode_copy_data(std::string_view bytes) {
  if (bytes.empty()) return DecodeError{"CopyData: an empty message", 0};
  switch (bytes.front()) {
    case 'w':
      return decode_xlog_data(bytes);
    case 'k':
      return decode_keepalive(bytes);
    default:
      return DecodeError{
          fmt::format("CopyData: unknown message type {}; expected 'w' (XLogData) or 'k' "
                      "(primary keepalive)",
                      describe_byte(static_cast<unsigned char>(bytes.front()))),
          0};
  }
}

std::array<char, kStandbyStatusUpdateSize> encode_standby_status_update(
    const StandbyStatusUpdate& update) {
  std::array<char, kStandbyStatusUpdateSize> out{};
  out[0] = 'r';
  put_u64(&out[1], update.written);
  put_u64(&out[9], update.flushed);
  put_u64(&out[17], update.applied);
  put_u64(&out[25], static_cast<std::uint64_t>(update.clock));
  out[33] = update.reply_requested ? 1 : 0;
  return out;
}

std::variant<StandbyStatusUpdate, DecodeError> decode_standby_status_update(
    std::string_view bytes) {
  if (bytes.empty() || bytes.front() != 'r') {
    return DecodeError{"standby status update: does not start with 'r'", 0};
  }
  Reader in(bytes, "standby status update", 1);
  StandbyStatusUpdate update;
  std::uint8_t reply = 0;
  in.u64(update.written, "the written LSN");
  in.u64(update.flushed, "the flushed LSN");
  in.u64(update.applied, "the applied LSN");
  in.i64(update.clock, "the clock");
  if (in.u8(reply, "the reply-requested flag") && reply > 1) {
    in.fail(fmt::format("the reply-requested flag is {}, not 0 or 1", reply));
  }
  if (!in.finish()) return in.error();
  update.reply_requested = reply == 1;
  return update;
}

PgTimestamp to_pg_timestamp(std::chrono::system_clock::time_point time) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(time.time_since_epoch());
  return micros.count() - kPgEpochInUnixMicros;
}

std::string format_pg_timestamp(PgTimestamp time) {
  const std::int64_t micros = time + kPgEpochInUnixMicros;
  // Floor division: a time before 1970 has a negative remainder otherwise.
  std::int64_t seconds = micros / 1000000;
  std::int64_t fraction = micros % 1000000;
  if (fraction < 0) {
    fraction += 1000000;
    --seconds;
  }
  const auto whole = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&whole, &utc);
  return fmt::format("{:%Y-%m-%d %H:%M:%S}.{:06d}+00", utc, fraction);
}

std::string format_lsn(Lsn lsn) { return fmt::format("{:X}/{:X}", lsn >> 32U, lsn & 0xFFFF'FFFFU); }

}  // namespace outbox::cdc
